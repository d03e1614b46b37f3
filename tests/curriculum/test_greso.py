"""GRESO (arXiv 2506.02177): pre-rollout skipping on zero-variance streaks, against known
and drifting pass rates; the adaptive keep probabilities, by hand and in simulation.

Legend: N = 8 responses per group; a prompt's streak k counts its last consecutive
all-wrong (k < 0) or all-correct (k > 0) visits; keep probability max(p^|k|, floor).
"""

import collections
import math

import numpy as np
import pytest

from openrlhf_speed.curriculum import PromptHistory, SpeedConfig
from openrlhf_speed.curriculum.history_strategies import GresoStrategy
from openrlhf_speed.curriculum.simulate import run_simulation


def greso_cfg(**kw):
    base = dict(strategy="greso", n_samples_per_prompt=8, batch_prompts=4, warn_qualification_rate=0.0)
    base.update(kw)
    return SpeedConfig(**base).validate()


def started_by_epoch(requests):
    """{epoch: set of prompts started}: GRESO requests all N at once, so one request a visit."""
    out = collections.defaultdict(set)
    for r in requests:
        out[r.epoch].add(r.prompt_index)
    return out


def test_keep_probability_is_p_to_the_streak_with_a_floor():
    g = GresoStrategy(greso_cfg())
    assert (g.p_easy, g.p_hard, g.floor) == (0.5, 0.5, 0.01)  # the paper's defaults
    g.p_easy = 0.8
    assert g.keep_probability(0) == 1.0
    assert g.keep_probability(-3) == 0.125  # hard: p_hard^3
    assert math.isclose(g.keep_probability(2), 0.64)  # easy: p_easy^2
    assert g.keep_probability(-7) == 0.01  # 0.5^7 < floor


def test_skip_frequency_matches_keep_probability():
    g = GresoStrategy(greso_cfg(seed=5))
    h = PromptHistory(6000)
    h.streak[:3000] = -3  # keep 0.125
    h.streak[3000:] = 1  # keep 0.5
    h.epoch = 2
    decisions = [g.start(i, h) for i in range(6000)]
    skipped_hard = sum(d.verdict == "skip" for d in decisions[:3000]) / 3000
    skipped_easy = sum(d.verdict == "skip" for d in decisions[3000:]) / 3000
    assert abs(skipped_hard - 0.875) < 0.02 and abs(skipped_easy - 0.5) < 0.03  # ~3 sd
    assert {d.reason for d in decisions[:3000] if d.verdict == "skip"} == {"greso_skip_hard"}
    assert {d.reason for d in decisions[3000:] if d.verdict == "skip"} == {"greso_skip_easy"}
    kept = [d for d in decisions if d.verdict != "skip"]
    assert all((d.n, d.phase) == (8, "full") for d in kept)  # all N at once
    assert [g.start(i, h) for i in range(50)] == decisions[:50]  # keyed draws: same again


def test_adaptive_step_hand_computed():
    g = GresoStrategy(greso_cfg())  # target 0.25: easy 1/12, hard 1/6
    g.rolled = [1, 5, 10]  # 10% all correct >= 8.3%, 50% all wrong >= 16.7%: skip more
    g.on_batch(epoch=0)
    assert (g.p_easy, g.p_hard, g.rolled) == (0.5, 0.5, [0, 0, 0])  # epoch 0: counted, not used
    g.rolled = [1, 5, 10]
    g.on_batch(epoch=1)
    assert (g.p_easy, g.p_hard) == (0.49, 0.49)
    g.rolled = [0, 1, 10]  # 0% and 10%: below both targets, skip less
    g.on_batch(epoch=1)
    assert (g.p_easy, g.p_hard) == (0.5, 0.5)
    g.p_easy, g.p_hard = 0.055, 0.945
    g.rolled = [9, 0, 10]
    g.on_batch(epoch=3)
    assert (g.p_easy, g.p_hard) == (0.05, 0.95)  # clamped to [0.05, 0.95]
    assert g.metrics() == {"greso_p_easy": 0.05, "greso_p_hard": 0.95}
    g2 = GresoStrategy(greso_cfg())
    g2.load_state_dict(g.state_dict())
    assert g2.state_dict() == g.state_dict()


def test_zero_pass_rate_prompts_are_skipped_increasingly():
    rates = [0.0] * 60 + [1.0] * 20 + [0.5] * 40
    res = run_simulation(rates, greso_cfg(num_epochs=6, seed=3), seed=4, completions_per_tick=12)
    started = started_by_epoch(res.requests)
    zero = [sum(i < 60 for i in started[e]) for e in range(6)]
    assert zero[0] == 60 and zero[1] < 45 and zero[3] < zero[1] and zero[5] < 15
    half = sum(sum(60 + 20 <= i for i in started[e]) for e in range(6))
    assert half >= 0.95 * 40 * 6  # mixed prompts are (almost) never skipped
    t = res.scheduler.totals()
    assert t["reason/greso_skip_hard"] + t["reason/greso_skip_easy"] == t["prompts_skipped"] > 100
    # DAPO's filter after rollout: only mixed groups are trained.
    assert all(0 < g.rewards.mean() < 1 for b in res.batches for g in b.groups)


def test_solvable_again_prompt_is_picked_up_at_the_floor_rate():
    # p_init = floor = 0.2 and no adaptation: every zero prompt is kept with probability
    # exactly max(0.2^k, 0.2) = 0.2 once its streak is k >= 1. After the drift (epoch 4: p
    # 0 -> 0.5) its first start is Geometric(0.2): mean 1 / floor = 5 epochs, and it stays
    # (a mixed group resets the streak).
    drift_epoch, epochs, zeros = 4, 30, 150
    rates = [0.0] * zeros + [0.5] * 20

    def rate_fn(i, epoch, version):
        return 0.5 if i >= zeros or epoch >= drift_epoch else 0.0

    cfg = greso_cfg(num_epochs=epochs, explore_floor=0.2, greso_p_init=0.2, greso_p_step=0.0, batch_prompts=8)
    res = run_simulation(rates, cfg, seed=8, completions_per_tick=40, rate_fn=rate_fn)
    started = started_by_epoch(res.requests)
    delays = []
    for i in range(zeros):
        after = [e for e in range(drift_epoch, epochs) if i in started[e]]
        delays.append(after[0] - drift_epoch + 1 if after else epochs - drift_epoch + 1)  # censored: P = 0.8^26
    delays = np.array(delays)  # [zeros]
    sd = math.sqrt(0.8) / 0.2 / math.sqrt(zeros)  # sd of a mean of Geometric(0.2)
    assert abs(delays.mean() - 5.0) < 3 * sd
    assert abs(np.mean(delays <= 10) - (1 - 0.8**10)) < 3 * math.sqrt(0.11 * 0.89 / zeros)
    # Before the drift the same rate holds: ~20% of the zero prompts start each epoch.
    before = [sum(i < zeros for i in started[e]) / zeros for e in range(1, drift_epoch)]
    assert all(abs(b - 0.2) < 0.1 for b in before)
    # Picked up for good: in the last epochs nearly every drifted prompt is rolled out.
    assert sum(i < zeros for i in started[epochs - 1]) >= 0.95 * zeros


@pytest.mark.parametrize("mix, direction", [("mostly_zero_variance", -1), ("all_mixed", +1)])
def test_adaptive_probabilities_move_toward_the_target_share(mix, direction):
    rates = [0.0] * 60 + [1.0] * 30 + [0.5] * 10 if mix == "mostly_zero_variance" else [0.5] * 100
    res = run_simulation(rates, greso_cfg(num_epochs=8, seed=1), seed=2, completions_per_tick=10)
    p_hard = [b.metrics["speed/greso_p_hard"] for b in res.batches]
    p_easy = [b.metrics["speed/greso_p_easy"] for b in res.batches]
    for p in (p_hard, p_easy):
        assert all(0.05 <= x <= 0.95 for x in p)
        assert direction * (p[-1] - 0.5) > 0.05  # moved, in the direction the share asks
    if mix == "mostly_zero_variance":
        # Skipping brings the rolled-out zero-variance share down toward the 25% target.
        started = started_by_epoch(res.requests)
        share = [np.mean([i < 90 for i in started[e]]) for e in range(8)]  # zero-variance prompts rolled out
        assert share[0] == 0.9 and share[-1] < 0.5
        assert all(b <= a + 0.05 for a, b in zip(share, share[1:]))
