"""Checkpoint round trip: a resumed scheduler issues the same requests and batches.

Run A is uninterrupted. Run B stops after k batches, pickles `state_dict()`, restores it
into a fresh Scheduler and a fresh driver (which has lost its outstanding requests) and
continues. B's first `next_requests()` hands out again everything that was outstanding,
with the same ids; after that, B's requests and batches equal A's.
"""

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.curriculum.simulate import SimulatedDriver, SimulatedPolicy

PLAIN = (dict, list, tuple, int, float, str, bool, type(None), np.integer, np.floating, np.ndarray)


def assert_plain(obj, path="state"):
    """Only plain python (and numpy scalars) in the state: no dataclasses, no objects."""
    assert isinstance(obj, PLAIN), f"{path} is a {type(obj).__name__}"
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert_plain(k, f"{path} key")
            assert_plain(v, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            assert_plain(v, f"{path}[{i}]")


def batch_view(batch):
    """What must be equal between runs: prompts, payloads, rewards, metrics (nan-safe)."""
    metrics = {k: ("nan" if math.isnan(v) else v) for k, v in batch.metrics.items()}
    groups = [(g.prompt_index, g.epoch, [(r.payload, r.reward, r.policy_version) for r in g.responses])
              for g in batch.groups]
    return batch.step, groups, metrics, batch.starvation_warning


def driver_for(cfg, rates, per_tick, sched=None):
    sched = sched or Scheduler(len(rates), cfg)
    return SimulatedDriver(sched, SimulatedPolicy(rates, seed=11), completions_per_tick=per_tick)


def run_ticks(driver, ticks):
    batches = [driver.tick() for _ in range(ticks)]
    return [b for b in batches if b is not None]


def check_resume(cfg, rates, per_tick, save_tick):
    """Save after `save_tick` ticks: usually mid-window, with requests outstanding."""
    a = driver_for(cfg, rates, per_tick)
    a_first = run_ticks(a, save_tick)
    pending_at_save = sorted(a.pending)
    n_requests_at_save = len(a.requests)
    a_rest = a.run()

    b = driver_for(cfg, rates, per_tick)
    b_first = run_ticks(b, save_tick)
    state = b.scheduler.state_dict()
    assert_plain(state)
    restored = Scheduler(len(rates), cfg)
    restored.load_state_dict(pickle.loads(pickle.dumps(state)))
    b2 = driver_for(cfg, rates, per_tick, sched=restored)
    b_rest = b2.run()

    assert [batch_view(x) for x in b_first] == [batch_view(x) for x in a_first]
    assert [batch_view(x) for x in b_rest] == [batch_view(x) for x in a_rest]
    reissued = [r.request_id for r in b2.requests[: len(pending_at_save)]]
    assert reissued == pending_at_save
    assert b2.requests[len(pending_at_save):] == a.requests[n_requests_at_save:]
    assert restored.totals() == a.scheduler.totals()
    return pending_at_save, state


def test_resume_with_requests_in_flight():
    rates = [0.0, 0.3, 0.5, 0.7, 1.0] * 12
    cfg = SpeedConfig(n_samples_per_prompt=6, n_init=3, batch_prompts=3, max_inflight_prompts=9,
                      buffer_size=14, num_epochs=2, seed=4, warn_qualification_rate=0.0)
    pending, state = check_resume(cfg, rates, per_tick=4, save_tick=7)
    assert pending, "the case must have requests in flight at save time"
    assert state["window"]["screened"] > 0 and state["window"]["tokens"], "and a window under way"


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    strategy=st.sampled_from(["speed", "dapo", "uniform"]),
    save_tick=st.integers(0, 25),
    per_tick=st.one_of(st.none(), st.integers(1, 6)),
    seed=st.integers(0, 5),
)
def test_resume_equals_uninterrupted(strategy, save_tick, per_tick, seed):
    rates = [0.0, 0.25, 0.5, 0.75, 1.0] * 6
    cfg = SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2, max_inflight_prompts=6,
                      buffer_size=9, num_epochs=2, seed=seed, strategy=strategy,
                      warn_qualification_rate=0.0)
    check_resume(cfg, rates, per_tick, save_tick)


def test_state_keeps_buffer_payloads_and_engine_hints():
    cfg = SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=8, max_inflight_prompts=6)
    d = driver_for(cfg, [0.5] * 20, per_tick=3)
    for _ in range(4):
        d.tick()
    state = d.scheduler.state_dict()
    restored = Scheduler(20, cfg)
    restored.load_state_dict(pickle.loads(pickle.dumps(state)))
    outstanding = sorted(d.scheduler._inflight)
    again = restored.next_requests()  # the outstanding ones first, then new screenings
    assert [r.request_id for r in again[: len(outstanding)]] == outstanding
    assert all(r.phase == "screen" for r in again[len(outstanding):])
    conts = [r for r in again if r.phase == "continue"]
    assert conts and all(r.engine_hint is not None for r in conts)
    assert restored.buffer_len == d.scheduler.buffer_len
    assert [s.responses for s in restored._ready] == [s.responses for s in d.scheduler._ready]


def test_resume_rejects_changed_layout_but_accepts_more_epochs():
    cfg = SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2)
    state = Scheduler(10, cfg).state_dict()
    with pytest.raises(ValueError, match="--speed.n_init \\(checkpoint 2, now 3\\)"):
        Scheduler(10, SpeedConfig(n_samples_per_prompt=4, n_init=3, batch_prompts=2)).load_state_dict(state)
    with pytest.raises(ValueError, match="dataset size"):
        Scheduler(11, cfg).load_state_dict(state)
    Scheduler(10, SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2, num_epochs=3)).load_state_dict(state)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    strategy=st.sampled_from(["greso", "cures", "speed_bayes"]),
    save_tick=st.integers(0, 60),
    per_tick=st.one_of(st.none(), st.integers(1, 6)),
    seed=st.integers(0, 5),
)
def test_history_strategies_resume_equals_uninterrupted(strategy, save_tick, per_tick, seed):
    # Four epochs, so the saved state holds history (posteriors, streaks), the strategy's own
    # state (GRESO's probabilities) and a reordered epoch (CurES) that the rest depends on.
    rates = [0.0, 0.0, 0.25, 0.5, 0.75, 1.0] * 5
    cfg = SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2, max_inflight_prompts=6,
                      buffer_size=9, num_epochs=4, seed=seed, strategy=strategy, warn_qualification_rate=0.0,
                      explore_floor=0.3, greso_p_step=0.05)
    _, state = check_resume(cfg, rates, per_tick, save_tick)
    assert state["history"]["last_epoch"].shape == (len(rates),) and state["order"].shape == (len(rates),)


def test_restored_state_carries_history_strategy_and_order():
    rates = [0.0, 1.0, 0.5] * 10
    cfg = SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2, num_epochs=3, strategy="greso",
                      warn_qualification_rate=0.0, greso_p_step=0.1)
    d = driver_for(cfg, rates, per_tick=4)
    for _ in range(14):  # into epoch 2, after batches of epoch 1 (GRESO adapts from epoch 1 on)
        d.tick()
    state = pickle.loads(pickle.dumps(d.scheduler.state_dict()))
    assert state["format"] == 2 and state["epoch"] == 2 and state["strategy"]["p_hard"] != 0.5
    restored = Scheduler(len(rates), cfg)
    restored.load_state_dict(state)
    assert restored.strategy.state_dict() == d.scheduler.strategy.state_dict()
    np.testing.assert_array_equal(restored.history.streak, d.scheduler.history.streak)
    np.testing.assert_array_equal(restored._order, d.scheduler._order)
    # The checkpoint owns its arrays: later decisions of the saving run do not leak into it.
    d.run()
    assert not np.array_equal(state["history"]["correct"], d.scheduler.history.correct)
