"""speed_bayes: SPEED screening, skipped for prompts a decaying Beta posterior is confident
about, bypassed (all N at once) for prompts confidently inside the band.

Legend: N = 8, N_init = 4, band (0, 1); posterior Beta(0.5 + c, 0.5 + w) with c / w the
correct / wrong counts decayed by d per epoch; P_fail = P(a screening of 4 is all wrong or
all correct) under the posterior predictive, computed here with the closed forms
P(0 of n) = prod_j (b + j) / (a + b + j) and P(n of n) = prod_j (a + j) / (a + b + j).
"""

import collections
import math

import numpy as np

from openrlhf_speed.curriculum import SpeedConfig
from openrlhf_speed.curriculum.compare import compare_strategies
from openrlhf_speed.curriculum.simulate import run_simulation


def bayes_cfg(**kw):
    base = dict(strategy="speed_bayes", n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                warn_qualification_rate=0.0)
    base.update(kw)
    return SpeedConfig(**base).validate()


def expected_screenings(epochs, decay, confidence, n_init=4):
    """Screen (True) or skip (False) per epoch for a prompt whose screenings are all wrong,
    with no exploration floor: the posterior widens while skipped until P_fail < confidence.
    Asserts every P_fail is > 1e-3 away from the threshold, so float32 counts cannot flip it."""
    out, w, last = [], 0.0, None
    for e in range(epochs):
        screen = last is None
        if not screen:
            a, b = 0.5, 0.5 + w * decay ** (e - last)
            p_fail = (math.prod((b + j) / (a + b + j) for j in range(n_init))
                      + math.prod((a + j) / (a + b + j) for j in range(n_init)))
            assert abs(p_fail - confidence) > 1e-3
            screen = p_fail < confidence
        if screen:
            w = (w * decay ** (e - last) if last is not None else 0.0) + n_init
            last = e
        out.append(screen)
    return out


def starts(requests, prompts, epochs):
    """[prompt][epoch] -> the first request of that visit, or None when skipped."""
    first = {(r.prompt_index, r.epoch): r for r in requests if r.phase != "continue"}
    return [[first.get((i, e)) for e in range(epochs)] for i in prompts]


# Exact schedules need each visit's result recorded before the prompt's next visit starts.
# Epochs stream into each other, and skips take no capacity, so one next_requests() call
# may start a prompt's next visit while its last one is still in flight; one prompt in
# flight at a time (max_inflight_prompts=1, every request completed in its tick) rules
# that out.


def test_failed_prompts_skip_screening_until_the_decayed_posterior_widens():
    epochs = 16
    expected = expected_screenings(epochs, decay=0.9, confidence=0.78)
    # Screened at epochs 0, 1, then skipped until the decayed posterior is unsure again:
    # about every fifth epoch. (P_fail after one all-wrong screening: 0.72 < 0.78; after
    # two, decayed to 0.9 * 7.6 wrong: 0.80 >= 0.78.)
    assert "".join("S" if x else "." for x in expected) == "SS..S....S....S."
    rates = [0.0] * 12 + [1.0] * 12 + [0.5] * 16
    cfg = bayes_cfg(num_epochs=epochs, explore_floor=0.0, bayes_skip_confidence=0.78, seed=1,
                    max_inflight_prompts=1)
    res = run_simulation(rates, cfg, seed=2)
    for row in starts(res.requests, range(24), epochs):  # p = 0 and p = 1 alike (symmetric prior)
        assert [r is not None for r in row] == expected
        assert all(r.phase == "screen" and r.n == 4 for r in row if r is not None)
    t = res.scheduler.totals()
    skipped = epochs - sum(expected)
    assert t["reason/bayes_skip_low"] == 12 * skipped and t["reason/bayes_skip_high"] == 12 * skipped
    assert t["prompts_skipped"] == 24 * skipped and t.get("reason/bayes_explore", 0) == 0


def test_confident_band_prompts_are_admitted_without_screening():
    rates = [0.5] * 30 + [0.0] * 10
    res = run_simulation(rates, bayes_cfg(num_epochs=5, seed=3), seed=4, completions_per_tick=10)
    rows = starts(res.requests, range(40), 5)
    late_mid = [r for row in rows[:30] for r in row[2:]]  # a p = 0.5 prompt, epochs 2-4
    admitted = [r for r in late_mid if r is not None and r.phase == "full"]
    # Rarely skipped (two all-wrong screenings: 1/256), mostly admitted.
    assert sum(r is not None for r in late_mid) >= 0.95 * len(late_mid) and len(admitted) >= 0.8 * len(late_mid)
    assert all(r.n == 8 for r in admitted)
    assert all(r is None or r.phase == "screen" for row in rows[30:] for r in row)  # never admitted
    t = res.scheduler.totals()
    assert t["reason/bayes_admit"] == sum(1 for row in rows for r in row if r is not None and r.phase == "full")
    assert t["tokens_full"] > 0
    groups = [g for b in res.batches for g in b.groups]
    assert all(0 < g.rewards.mean() < 1 for g in groups)  # admitted groups are filtered on the band too
    assert {g.n_screen for g in groups} == {4, 8}


def test_decay_rescreens_a_prompt_that_became_solvable():
    drift, epochs = 6, 14
    expected = expected_screenings(epochs, decay=0.9, confidence=0.78)
    rescreen = next(e for e in range(drift, epochs) if expected[e])  # first scheduled look after the drift
    assert rescreen - drift <= 4

    def rate_fn(i, epoch, version):
        return 0.5 if i >= 30 or epoch >= drift else 0.0

    cfg = bayes_cfg(num_epochs=epochs, explore_floor=0.0, bayes_skip_confidence=0.78, seed=5,
                    max_inflight_prompts=1)
    res = run_simulation([0.0] * 30 + [0.5] * 10, cfg, seed=6, rate_fn=rate_fn)
    rows = starts(res.requests, range(30), epochs)
    for row in rows:
        assert [r is not None for r in row[:rescreen + 1]] == expected[:rescreen + 1]
    trained = collections.Counter((g.prompt_index, g.epoch) for b in res.batches for g in b.groups)
    assert sum(trained[i, rescreen] for i in range(30)) >= 0.75 * 30  # P(mixed 4 of p = 0.5) = 7/8
    # Once solvable, they are screened (or admitted) almost every epoch; only a prompt whose
    # re-screening came out all wrong again (1/16) may still be skipped.
    assert sum(row[-1] is not None for row in rows) >= 0.8 * 30


def test_exploration_floor_screens_skipped_prompts_at_its_rate():
    # No decay: the posterior of an always-failing prompt only sharpens, so after a few
    # epochs every visit meets the skip test and only the floor (0.3) brings it back.
    res = run_simulation([0.0] * 200, bayes_cfg(num_epochs=10, explore_floor=0.3, posterior_decay=1.0, seed=7),
                         seed=8, completions_per_tick=40)
    t = res.scheduler.totals()
    explored, skipped = t["reason/bayes_explore"], t["reason/bayes_skip_low"]
    rate = explored / (explored + skipped)
    assert explored + skipped > 1000
    assert abs(rate - 0.3) < 3 * math.sqrt(0.3 * 0.7 / (explored + skipped))


def test_fewer_screening_tokens_than_speed_for_the_same_trained_groups():
    rates = [0.0] * 40 + [1.0] * 20 + [0.05] * 10 + [0.3] * 10 + [0.5] * 10 + [0.8] * 10
    res = compare_strategies(["speed", "speed_bayes"], rates, epochs=10, batch_prompts=4, n=8, n_init=4, seed=0,
                             max_steps=60, completions_per_tick=12)
    speed, bayes = res["speed"], res["speed_bayes"]
    assert speed["groups_trained"] == bayes["groups_trained"] == 240
    assert bayes["tokens_screen"] < 0.6 * speed["tokens_screen"]
    assert bayes["tokens_total"] < 0.8 * speed["tokens_total"]
    assert bayes["useful_token_share"] > speed["useful_token_share"]
    assert bayes["prompts_skipped"] > 0 and speed["prompts_skipped"] == 0
    assert bayes["zero_variance_share"] == speed["zero_variance_share"] == 0.0
