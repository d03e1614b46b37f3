"""--speed.pace_batches P: new prompts start only while fewer than P batches of groups are
expected from the work ahead. Driven as the CPU driver's serial schedule drives the scheduler
(simulate.run_serial): a step whose batch comes from groups in hand still starts a generation batch."""

import warnings

import numpy as np
import pytest

from openrlhf_speed.curriculum import Response, Scheduler, SpeedConfig, StarvationWarning
from openrlhf_speed.curriculum.scheduler import PACE_DECAY
from openrlhf_speed.curriculum.simulate import run_serial


def _cfg(pace, strategy="speed", **kw):
    base = dict(n_samples_per_prompt=8, n_init=4, batch_prompts=8, max_inflight_prompts=32,
                max_staleness=2, strategy=strategy, seed=0, num_epochs=50, pace_batches=pace)
    base.update(kw)
    return SpeedConfig(**base)


def _serial_run(cfg, rates, steps, per_tick=6, seed=0, tags=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StarvationWarning)
        res = run_serial(rates, cfg, steps, seed=seed, completions_per_tick=per_tick, tags=tags)
    return res.scheduler, res.batches


def _easy_mix(n=400, seed=0):
    # Most prompts are solved 80-95% of the time: 4 of 4 right often, yet a group of 8 is often
    # mixed, so SPEED qualifies about half of what it screens, as on the easy benchmark mix.
    return np.random.default_rng(seed).uniform(0.5, 0.95, size=n)


@pytest.mark.parametrize("strategy", ["speed", "dapo"])
def test_pacing_loses_fewer_groups_to_the_bound_for_the_same_batches(strategy):
    rates = _easy_mix()
    loose, loose_batches = _serial_run(_cfg(None, strategy), rates, steps=30)
    paced, paced_batches = _serial_run(_cfg(2, strategy), rates, steps=30)
    lost = loose.totals()["prompts_rescreened_stale"]
    assert lost >= 30  # the overflow pacing is for: at least one group a step
    assert paced.totals().get("prompts_rescreened_stale", 0) <= lost / 10
    assert paced.totals()["tokens_generated"] < 0.85 * loose.totals()["tokens_generated"]
    # The same training: exactly B groups of N each step, within the bound.
    for batch in paced_batches:
        assert len(batch.groups) == 8 and all(len(g.responses) == 8 for g in batch.groups)
        assert batch.metrics["speed/staleness_screen_max"] <= 2
    assert len(paced_batches) == len(loose_batches) == 30


def test_pacing_composes_with_a_strategy_that_screens_by_tag():
    """speed_thin+level+pace2, as the benchmarks run it: the pace removes the easy mix's overflow,
    while the per-tag screen still decides which prompts are screened at all."""
    rates = _easy_mix(seed=1)
    tags = [int(r > 0.8) for r in rates]  # two levels: the easier one qualifies less often
    cfg = dict(strategy="speed_thin", prior_key="level")
    loose, _ = _serial_run(_cfg(None, **cfg), rates, steps=30, tags=tags)
    paced, batches = _serial_run(_cfg(2, **cfg), rates, steps=30, tags=tags)
    lost = loose.totals()["prompts_rescreened_stale"]
    assert lost >= 30
    assert paced.totals().get("prompts_rescreened_stale", 0) <= lost / 10
    assert paced.totals()["tokens_generated"] < 0.85 * loose.totals()["tokens_generated"]
    assert len(batches) == 30 and all(len(b.groups) == 8 for b in batches)
    assert "speed/pace_expected_groups" in batches[-1].metrics
    assert any(k.endswith("thin_screened_share") for k in batches[-1].metrics)


def test_a_shorter_pace_trains_fresher_samples():
    # P = 1 pre-fetches nothing for later batches: the trained screenings are younger.
    rates = _easy_mix(seed=2)
    ages = {}
    for pace in (1, 3):
        _, batches = _serial_run(_cfg(pace), rates, steps=20)
        ages[pace] = np.mean([b.metrics["speed/staleness_screen_mean"] for b in batches])
    assert ages[1] < 0.5 < ages[3]


def test_a_hard_mix_where_nothing_overflows_runs_as_without_pacing():
    # Few prompts qualify: the work ahead never reaches B x (K + 1), so pacing holds nothing back
    # once the rate is learned, and the runs train the same number of groups.
    rates = np.random.default_rng(1).uniform(0.0, 0.12, size=400)
    loose, _ = _serial_run(_cfg(None), rates, steps=10)
    paced, _ = _serial_run(_cfg(2), rates, steps=10)
    assert loose.totals().get("prompts_rescreened_stale", 0) == paced.totals().get("prompts_rescreened_stale", 0) == 0
    assert paced.totals()["prompts_screened"] == pytest.approx(loose.totals()["prompts_screened"], rel=0.15)


def _responses(k_correct, n):
    return [Response(float(j < k_correct), 10, 0) for j in range(n)]


def test_the_first_requests_stop_at_the_groups_that_can_train():
    # B = 4, P = 2: 8 groups. The rate starts at 1, so 8 screenings start where 32 may be in
    # flight; without pacing all 32 start.
    sched = Scheduler(100, _cfg(2, batch_prompts=4, max_staleness=1))
    first = sched.next_requests()
    assert len(first) == sched.pace_limit == 8 and sched.expected_groups == 8
    assert len(Scheduler(100, _cfg(None, batch_prompts=4, max_staleness=1)).next_requests()) == 32
    # Two screenings fail (all wrong), one qualifies: the rate falls, the continuation counts one.
    for req, k in zip(first[:3], (0, 0, 2)):
        sched.submit(req.request_id, _responses(k, 4))
    q = (1 * PACE_DECAY ** 3 + 1) / sum(PACE_DECAY ** i for i in range(4))
    assert sched.pace_qualification == pytest.approx(q)
    assert sched.expected_groups == pytest.approx(1 + 5 * q)  # the continuation, 5 screenings
    more = sched.next_requests()  # the continuation, then screenings up to the limit
    assert more[0].phase == "continue"
    assert sched.expected_groups >= sched.pace_limit > sched.expected_groups - q


def test_pacing_needs_a_bound_and_fits_in_it():
    with pytest.raises(ValueError, match="--speed.pace_batches.*--speed.max_staleness"):
        _cfg(2, max_staleness=None).validate()
    for pace in (0, 4):  # K = 2: a group expected beyond 3 batches ahead goes stale
        with pytest.raises(ValueError, match=rf"--speed.pace_batches \({pace}\) must be in \[1, --speed.max_staleness"):
            _cfg(pace).validate()
    _cfg(3).validate()


def test_batches_report_the_pace_and_a_resumed_run_keeps_it():
    rates = _easy_mix(seed=3)
    sched, batches = _serial_run(_cfg(2), rates, steps=3)
    assert {"speed/pace_expected_groups", "speed/pace_qualification"} <= set(batches[-1].metrics)
    assert 0 < batches[-1].metrics["speed/pace_qualification"] < 1
    state = sched.state_dict()
    restored = Scheduler(len(rates), _cfg(2))
    restored.load_state_dict(state)
    assert restored.pace_qualification == sched.pace_qualification
    # A checkpoint from before pacing has no rate: the prior's.
    del state["pace"]
    restored.load_state_dict(state)
    assert restored.pace_qualification == 1.0
    # Turning pacing on or off is a change a resumed run may make.
    Scheduler(len(rates), _cfg(None)).load_state_dict(sched.state_dict())
    _, loose = _serial_run(_cfg(None), rates, steps=1)
    assert "speed/pace_expected_groups" not in loose[0].metrics
