"""The staleness bound (--speed.max_staleness) and the starvation warning that does not
wait for a batch, driven by the simulated engine with scrambled completion order."""

import warnings

import numpy as np
import pytest

from openrlhf_speed.curriculum import Response, Scheduler, SpeedConfig, StarvationWarning
from openrlhf_speed.curriculum.metrics import starvation_due
from openrlhf_speed.curriculum.simulate import run_simulation
from openrlhf_speed.curriculum.staleness import REASON_STALE, stale_reason


def _run(bound, seed, per_tick, strategy="speed"):
    rates = np.random.default_rng(seed).beta(0.6, 0.9, size=300)
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=8, max_staleness=bound,
                      strategy=strategy, seed=seed)
    trained = []  # (policy_version at training, group)

    def observe(event, sched, payload):
        if event == "batch":
            trained.extend((sched.policy_version, g) for g in payload.groups)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StarvationWarning)
        res = run_simulation(rates, cfg, seed=seed, completions_per_tick=per_tick, observer=observe)
    return res, trained


@pytest.mark.parametrize("bound", [0, 1, 2])
@pytest.mark.parametrize("seed,per_tick", [(0, 3), (1, 5), (2, 11)])
def test_no_trained_group_is_older_than_the_bound(bound, seed, per_tick):
    res, trained = _run(bound, seed, per_tick)
    assert trained
    ages = [v - r.policy_version for v, g in trained for r in g.responses]
    assert max(ages) <= bound
    if bound == 0:  # strictly on-policy: every sample from the policy that trains on it
        assert set(ages) == {0}


def test_unbounded_staleness_is_what_the_bound_removes():
    # The same run with a bound too large to act: screening samples many versions old train.
    _, trained = _run(10_000, 0, 3)
    assert max(v - g.responses[0].policy_version for v, g in trained) > 2


@pytest.mark.parametrize("strategy", ["speed", "dapo"])
def test_rescreen_counts_are_exact(strategy):
    res, trained = _run(0, 1, 5, strategy)
    totals = res.scheduler.totals()
    first = [r for r in res.requests if r.phase in ("screen", "full")]
    rescreened = totals["prompts_rescreened_stale"]
    assert rescreened > 0
    # Each re-screen is one extra first request of an already started prompt visit.
    assert len(first) - totals["prompts_started"] == rescreened
    assert totals[f"reason/{REASON_STALE}"] == rescreened
    per_batch = sum(b.metrics["speed/prompts_rescreened_stale"] for b in res.batches)
    assert per_batch <= rescreened  # the rest happened after the last batch
    hist = sum(v for b in res.batches for k, v in b.metrics.items()
               if k.startswith("speed/staleness_screen_hist_"))
    assert hist == len(trained)


def _resp(version, reward):
    return [Response(reward, 10, version) for reward in reward]


def test_hand_case_ready_group_ages_out_and_is_screened_again():
    cfg = SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2, max_staleness=1,
                      max_inflight_prompts=1, buffer_size=3)
    sched = Scheduler(num_prompts=5, config=cfg)
    (screen,) = sched.next_requests()
    sched.submit(screen.request_id, _resp(0, [1.0, 0.0]))
    (cont,) = sched.next_requests()
    sched.submit(cont.request_id, _resp(0, [1.0, 0.0]))  # group ready at version 0
    sched.policy_version = 2  # two weight syncs later: age 2 > bound 1
    assert sched.pop_batch() is None
    again = [r for r in sched.next_requests() if r.prompt_index == screen.prompt_index]
    assert [(r.phase, r.n) for r in again] == [("screen", 2)]
    totals = sched.totals()
    assert totals["prompts_rescreened_stale"] == 1 and totals["tokens_stale_discarded"] == 40


def test_stale_reason_is_pure():
    assert stale_reason(3, 2) == REASON_STALE
    assert stale_reason(2, 2) is None and stale_reason(0, 0) is None
    assert stale_reason(99, None) is None


def test_negative_bound_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--speed.max_staleness"):
        SpeedConfig(max_staleness=-1).validate()


def test_total_starvation_warns_before_any_batch():
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=4)
    with pytest.warns(StarvationWarning) as record:
        res = run_simulation([0.0] * 50, cfg)
    assert res.batches == []
    messages = [str(w.message) for w in record if w.category is StarvationWarning]
    assert len(messages) == 4  # after 4, 8, 16 and 32 screenings
    assert "0 of 4 prompts" in messages[0] and "0/4: 32" in messages[-1]
    for flag in ("--speed.pass_rate_low", "--speed.pass_rate_high", "--speed.n_init"):
        assert flag in messages[0]
    assert res.scheduler.take_warnings() == messages and res.scheduler.take_warnings() == []


def test_starvation_due_doubles():
    assert [n for n in range(1, 70) if starvation_due(n, 4)] == [4, 8, 16, 32, 64]
