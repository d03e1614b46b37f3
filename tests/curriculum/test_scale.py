"""Paper-scale datasets (400k prompts): nothing the scheduler does per step is O(dataset).

Measured without clocks, on the simulated policy, for each curriculum (speed, greso,
speed_bayes, cures):
- the work that is O(dataset) by nature (an epoch's order, a strategy's reordering over
  every prompt's history, the checkpoint's state) runs once per epoch or per save, never
  per step: counted;
- a step allocates no dataset-sized memory (no copy of the order or of the per-prompt
  history): the peak allocation of a step, traced, stays far below one int8 array over
  the prompts, and is the same at 2k and 400k prompts;
- the curriculum state of a 400k-prompt checkpoint is under its 50 MB budget.
"""

import io
import tracemalloc

import numpy as np
import pytest
import torch

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.curriculum.history import PromptHistory
from openrlhf_speed.curriculum.simulate import SimulatedDriver, SimulatedPolicy

BIG = 400_000
STATE_BUDGET_BYTES = 50 * 2**20


def driver(num_prompts, strategy, seed=3, num_epochs=1):
    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=16, strategy=strategy, seed=seed,
                      num_epochs=num_epochs)
    rates = np.random.default_rng(seed).uniform(0.0, 1.0, size=num_prompts)
    return SimulatedDriver(Scheduler(num_prompts, cfg), SimulatedPolicy(rates, seed=seed), completions_per_tick=8)


def step_peaks(drv, steps):
    """The traced peak allocation (bytes) of each tick that pops a batch, the ticks before it
    included: one training step's worth of scheduler calls."""
    peaks = []
    tracemalloc.start()
    try:
        while len(peaks) < steps:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            while drv.tick() is None:
                pass
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()
    return peaks


@pytest.mark.parametrize("strategy", ["speed", "greso", "speed_bayes", "cures"])
def test_a_step_is_not_dataset_sized(strategy, monkeypatch):
    calls = {"order": 0, "counts_all": 0}
    real_order, real_counts_all = Scheduler.epoch_order, PromptHistory.counts_all

    def order(self, epoch):
        calls["order"] += 1
        return real_order(self, epoch)

    def counts_all(self, epoch):
        calls["counts_all"] += 1
        return real_counts_all(self, epoch)

    monkeypatch.setattr(Scheduler, "epoch_order", order)
    monkeypatch.setattr(PromptHistory, "counts_all", counts_all)
    small, big = driver(2_000, strategy), driver(BIG, strategy)
    for d in (small, big):
        d.run(max_steps=3)  # warm up: first allocations of lists and counters
    before = dict(calls)
    peak_small, peak_big = max(step_peaks(small, 20)), max(step_peaks(big, 20))
    # 20 steps of 16 prompts stay inside epoch 0 at 400k prompts: no O(dataset) call at all.
    assert calls == before, f"dataset-wide work during steps: {calls} after {before}"
    assert peak_big < BIG // 4, f"a step allocated {peak_big} bytes at {BIG} prompts"
    assert peak_big < 2 * peak_small + 64 * 1024, (peak_small, peak_big)


@pytest.mark.parametrize("strategy", ["speed", "greso", "speed_bayes"])
def test_epoch_wide_work_runs_once_per_epoch(strategy, monkeypatch):
    """A small dataset wrapping many times: the epoch order is made once per epoch."""
    made = []
    real = Scheduler._make_order
    monkeypatch.setattr(Scheduler, "_make_order", lambda self, epoch: made.append(epoch) or real(self, epoch))
    d = driver(64, strategy, num_epochs=10**6)
    d.run(max_steps=200)
    epochs = d.scheduler.totals()["epoch"]
    assert epochs >= 10, "the prompt set should wrap several times"
    assert made == list(range(int(epochs) + 1))  # epoch 0's at construction, then one per new epoch


@pytest.mark.parametrize("strategy", ["speed", "greso", "speed_bayes"])
def test_curriculum_state_of_400k_prompts_is_within_budget(strategy):
    d = driver(BIG, strategy)
    d.run(max_steps=5)
    buf = io.BytesIO()
    torch.save({"scheduler": d.scheduler.state_dict(), "policy_version": 5}, buf)
    assert buf.tell() < STATE_BUDGET_BYTES, f"{buf.tell() / 2**20:.1f} MB"
    # Most of it is the per-prompt arrays: 13 bytes of history and 4 of order per prompt.
    assert buf.tell() > 17 * BIG
