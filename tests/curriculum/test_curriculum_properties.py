"""Property tests against the simulated policy with known per-prompt pass rates.

Legend: N group size, B groups per batch, n_screen responses from a prompt's first request
(N_init for `speed`, N for `dapo`/`uniform`). Payload of a simulated response:
(prompt_index, request_id, phase, j).
"""

import collections
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openrlhf_speed.curriculum import SpeedConfig, StarvationError, StarvationWarning
from openrlhf_speed.curriculum.simulate import run_simulation

PASS_RATES = st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0])


@st.composite
def scenarios(draw):
    strategy = draw(st.sampled_from(["speed", "dapo", "uniform"]))
    n = draw(st.integers(3 if strategy == "speed" else 2, 8))
    b = draw(st.integers(1, 5))
    inflight = draw(st.integers(1, 12))
    band = draw(st.sampled_from([(0.0, 1.0), (0.0, 1.0), (0.2, 0.8), (0.0, 0.6)]))
    cfg = SpeedConfig(
        n_samples_per_prompt=n,
        n_init=draw(st.integers(2, n - 1)) if strategy == "speed" else 2,
        pass_rate_low=band[0], pass_rate_high=band[1],
        batch_prompts=b, max_inflight_prompts=inflight,
        buffer_size=draw(st.integers(b, b + 12)),
        strategy=strategy, seed=draw(st.integers(0, 3)), num_epochs=draw(st.integers(1, 3)),
        warn_qualification_rate=0.0,
    )
    rates = draw(st.lists(PASS_RATES, min_size=1, max_size=30))
    per_tick = draw(st.one_of(st.none(), st.integers(1, 10)))
    return cfg, rates, per_tick, draw(st.integers(0, 2**16))


def check_group(g, cfg, rates_band):
    """One trained group: N contiguous responses of one prompt, screening first."""
    n = cfg.n_samples_per_prompt
    assert len(g.responses) == n
    payloads = [r.payload for r in g.responses]  # [N] of (prompt, request_id, phase, j)
    assert {p[0] for p in payloads} == {g.prompt_index}
    first, rest = payloads[: g.n_screen], payloads[g.n_screen:]
    assert len({p[1] for p in first}) == 1 and [p[3] for p in first] == list(range(g.n_screen))
    if cfg.strategy == "speed":
        assert g.n_screen == cfg.n_init and {p[2] for p in first} == {"screen"}
        assert {p[2] for p in rest} == {"continue"} and len({p[1] for p in rest}) == 1
        assert first[0][1] < rest[0][1]
        screened = g.rewards[: cfg.n_init]
    else:
        assert g.n_screen == n and {p[2] for p in first} == {"full"}
        screened = g.rewards
    low, high = rates_band
    rate = float(np.mean(screened >= cfg.correct_threshold))
    if cfg.strategy != "uniform":
        # Under the default band: never an all-correct or all-wrong screening.
        assert low < rate < high


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_scheduler_invariants(scenario):
    cfg, rates, per_tick, seed = scenario
    bounds = []

    def observer(event, sched, payload):
        bounds.append((sched.buffer_len, sched.inflight_prompts))
        assert sched.buffer_len + sched.inflight_prompts <= cfg.buffer_limit
        assert sched.inflight_prompts <= cfg.inflight_limit

    res = run_simulation(rates, cfg, seed=seed, completions_per_tick=per_tick, observer=observer)
    sched = res.scheduler
    assert sched.exhausted and bounds

    for batch in res.batches:
        assert len(batch.groups) == cfg.batch_prompts
        assert batch.rewards().shape == (cfg.batch_prompts, cfg.n_samples_per_prompt)
        for g in batch.groups:
            check_group(g, cfg, (cfg.pass_rate_low, cfg.pass_rate_high))

    # Every prompt of every epoch started exactly once, none silently dropped.
    first = collections.Counter((r.epoch, r.prompt_index) for r in res.requests if r.phase != "continue")
    assert first == {(e, i): 1 for e in range(cfg.num_epochs) for i in range(len(rates))}

    # Conservation: started = trained + rejected + dropped at the end (< B).
    totals = sched.totals()
    trained = len(res.batches) * cfg.batch_prompts
    assert totals["groups_dropped_at_end"] < cfg.batch_prompts
    assert totals["prompts_started"] == trained + totals.get("prompts_rejected", 0) + totals["groups_dropped_at_end"]
    assert totals["prompts_screened"] == len(rates) * cfg.num_epochs
    if cfg.strategy == "uniform":
        assert totals.get("prompts_rejected", 0) == 0

    # Token accounting over the run equals what the policy generated.
    in_windows = sum(b.metrics["speed/tokens_generated"] for b in res.batches)
    assert in_windows <= totals["tokens_generated"]
    assert totals["tokens_generated"] == sum(
        totals.get(f"tokens_{p}", 0) for p in ("screen", "continue", "full"))
    # Reasons: one decision per scored request (plus none for starts).
    reasons = sum(v for k, v in totals.items() if k.startswith("reason/"))
    scored = len(res.requests)
    assert reasons == scored


def test_dapo_discards_counted_against_known_pass_rates():
    # Prompts with p in {0, 1} are always discarded by dapo; p = 0.5 with N = 8 almost never.
    rates = [0.0] * 10 + [1.0] * 10 + [0.5] * 20
    cfg = SpeedConfig(n_samples_per_prompt=8, batch_prompts=4, strategy="dapo", seed=1)
    res = run_simulation(rates, cfg, seed=3, completions_per_tick=5)
    t = res.scheduler.totals()
    assert t["reason/group_all_wrong"] == 10 and t["reason/group_all_correct"] >= 10
    trained = [g for b in res.batches for g in b.groups]
    assert all(rates[g.prompt_index] == 0.5 for g in trained)
    assert t["tokens_discarded"] > 0
    assert t["prompts_rejected"] == t["reason/group_all_wrong"] + t["reason/group_all_correct"]


def test_speed_never_trains_zero_or_one_pass_rate_prompts():
    rates = [0.0, 1.0] * 30 + [0.4] * 30
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=4, seed=2, num_epochs=2,
                      warn_qualification_rate=0.0)
    res = run_simulation(rates, cfg, seed=5, completions_per_tick=7)
    trained = [g for b in res.batches for g in b.groups]
    assert trained and all(rates[g.prompt_index] == 0.4 for g in trained)
    # Prompts with p in {0, 1} cost only their screening tokens.
    t = res.scheduler.totals()
    assert t["reason/screen_all_wrong"] >= 60 and t["reason/screen_all_correct"] >= 60


def test_starvation_hard_limit_raises_with_flags():
    rates = [0.0] * 200  # nothing ever qualifies
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=4, max_inflight_prompts=8,
                      max_screened_per_batch=40)
    with pytest.raises(StarvationError) as err:
        run_simulation(rates, cfg, completions_per_tick=1)
    msg = str(err.value)
    for flag in ("--speed.pass_rate_low", "--speed.pass_rate_high", "--speed.n_init",
                 "--speed.max_screened_per_batch"):
        assert flag in msg
    assert "0/4: 41" in msg  # the histogram: 41 prompts screened, all 0 of 4 correct


def test_starvation_without_limit_ends_the_run_and_explains():
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=4)
    res = run_simulation([0.0] * 50, cfg)
    assert res.batches == [] and res.scheduler.exhausted
    assert res.scheduler.totals()["prompts_rejected"] == 50
    assert "0/4: 50" in res.scheduler.starvation_warning


def test_low_qualification_rate_warns_with_histogram():
    rates = ([0.0] * 19 + [0.5]) * 20  # ~4% of prompts can qualify
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=2, max_inflight_prompts=16,
                      warn_qualification_rate=0.2)
    with pytest.warns(StarvationWarning, match="histogram"):
        res = run_simulation(rates, cfg, completions_per_tick=4)
    warned = [b.starvation_warning for b in res.batches if b.starvation_warning]
    assert warned and "--speed.pass_rate_low" in warned[0] and "0/4:" in warned[0]


def test_healthy_run_does_not_warn():
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StarvationWarning)
        res = run_simulation([0.5] * 80, cfg, completions_per_tick=6)
    assert all(b.starvation_warning is None for b in res.batches)
