"""PromptHistory (bounded per-prompt arrays), the Beta-Binomial predictive and keyed draws.

Hand-computed cases, a reference-vs-vectorized check (counts vs counts_all), the memory
bound for a million prompts, checkpoint round trips (format 2 and the older format 1).
"""

import math
import pickle

import numpy as np
import pytest

from openrlhf_speed.curriculum import BYTES_PER_PROMPT, PromptHistory, Scheduler, SpeedConfig
from openrlhf_speed.curriculum.history import decision_uniform
from openrlhf_speed.curriculum.posterior import betabinom_pmf
from openrlhf_speed.curriculum.simulate import SimulatedDriver, SimulatedPolicy


def test_record_decays_per_epoch_hand_computed():
    h = PromptHistory(5, decay=0.5)
    assert not h.seen(3) and h.counts(3, epoch=7) == (0.0, 0.0)
    h.record(3, epoch=0, n_correct=2, n=4)
    assert h.seen(3) and h.counts(3, epoch=0) == (2.0, 2.0)
    h.record(3, epoch=2, n_correct=1, n=4)  # old counts x 0.5^2, then + (1, 3)
    assert h.counts(3, epoch=2) == (1.5, 3.5)
    assert h.counts(3, epoch=3) == (0.75, 1.75)  # read-time decay, storage untouched
    h.record(3, epoch=1, n_correct=4, n=4)  # an older visit finishing late: no decay, epoch kept
    assert h.counts(3, epoch=2) == (5.5, 3.5) and h.last_epoch[3] == 2
    assert h.counts(0, epoch=2) == (0.0, 0.0) and h.last_epoch[0] == -1


def test_no_decay_accumulates_counts():
    h = PromptHistory(2)
    for e in range(5):
        h.record(1, epoch=e, n_correct=1, n=8)
    assert h.counts(1, epoch=9) == (5.0, 35.0)


def test_streak_counts_consecutive_zero_variance_visits():
    h = PromptHistory(1)
    seen = []
    for n_correct in (4, 4, 4, 0, 0, 2, 0, 4):  # of 4
        h.finish(0, n_correct, 4)
        seen.append(int(h.streak[0]))
    assert seen == [1, 2, 3, -1, -2, 0, -1, 1]


def test_streak_saturates_instead_of_wrapping():
    h = PromptHistory(2)
    for _ in range(300):
        h.finish(0, 0, 8)
        h.finish(1, 8, 8)
    assert (int(h.streak[0]), int(h.streak[1])) == (-127, 127)


def test_counts_all_matches_per_prompt_reference():
    rng = np.random.default_rng(0)
    h = PromptHistory(50, decay=0.7)
    for _ in range(400):
        n = int(rng.integers(1, 9))
        h.record(int(rng.integers(50)), int(rng.integers(0, 6)), int(rng.integers(0, n + 1)), n)
    correct, wrong = h.counts_all(8)
    ref = np.array([h.counts(i, epoch=8) for i in range(50)])  # [50, 2]
    np.testing.assert_allclose(correct, ref[:, 0], rtol=1e-12)
    np.testing.assert_allclose(wrong, ref[:, 1], rtol=1e-12)


def test_history_memory_is_bounded_for_a_million_prompts():
    h = PromptHistory(1_000_000)
    assert BYTES_PER_PROMPT == 13
    assert h.nbytes == 13 * 1_000_000 < 16 * 2**20
    # The checkpoint adds the epoch order (int32): still well under 20 MB per million prompts.
    sched = Scheduler(1_000_000, SpeedConfig(strategy="speed_bayes", batch_prompts=4))
    state = sched.state_dict()
    saved = sum(a.nbytes for a in state["history"].values()) + state["order"].nbytes
    assert saved == 17 * 1_000_000 < 20 * 2**20


def test_history_state_round_trip_and_shape_check():
    h = PromptHistory(4, decay=0.9)
    h.record(2, 1, 3, 4)
    h.finish(2, 0, 4)
    other = PromptHistory(4, decay=0.9)
    other.load_state_dict(pickle.loads(pickle.dumps(h.state_dict())))
    for f in ("correct", "wrong", "last_epoch", "streak"):
        np.testing.assert_array_equal(getattr(other, f), getattr(h, f))
        assert getattr(other, f).dtype == getattr(h, f).dtype
    with pytest.raises(ValueError, match="shape"):
        PromptHistory(5).load_state_dict(h.state_dict())


def test_format_1_checkpoint_still_loads():
    cfg = SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2, max_inflight_prompts=4, num_epochs=2,
                      warn_qualification_rate=0.0)
    d = SimulatedDriver(Scheduler(10, cfg), SimulatedPolicy([0.0, 0.5] * 5, seed=1), completions_per_tick=3)
    for _ in range(12):
        d.tick()
    state = d.scheduler.state_dict()
    # What a format-1 checkpoint held: per-prompt records, no order, no strategy state.
    h = d.scheduler.history
    state["history"] = {i: [(int(h.last_epoch[i]), 0, "screen", int(h.correct[i] + h.wrong[i]), int(h.correct[i]), 0.0)]
                        for i in range(10) if h.seen(i)}
    del state["order"], state["strategy"]
    state["format"] = 1
    restored = Scheduler(10, cfg)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.history.correct, h.correct)
    np.testing.assert_array_equal(restored.history.wrong, h.wrong)
    np.testing.assert_array_equal(restored._order, restored.epoch_order(state["epoch"]))
    with pytest.raises(ValueError, match="format 7"):
        Scheduler(10, cfg).load_state_dict({**state, "format": 7})


@pytest.mark.parametrize("n, a, b", [(4, 1.0, 1.0), (8, 0.5, 4.5), (6, 3.7, 3.7), (3, 2.0, 0.25)])
def test_beta_binomial_predictive_hand_formulas(n, a, b):
    pmf = betabinom_pmf(n, a, b)
    assert pmf.shape == (n + 1,) and math.isclose(pmf.sum(), 1.0, rel_tol=1e-12)
    # P(0 of n) = prod_j (b + j) / (a + b + j); the mean is n a / (a + b).
    p0 = math.prod((b + j) / (a + b + j) for j in range(n))
    assert math.isclose(pmf[0], p0, rel_tol=1e-12)
    assert math.isclose(float(pmf @ np.arange(n + 1)), n * a / (a + b), rel_tol=1e-12)
    if a == b == 1.0:  # a uniform prior predicts every k equally
        np.testing.assert_allclose(pmf, 1 / (n + 1), rtol=1e-12)


def test_keyed_draws_are_deterministic_and_uniform():
    assert decision_uniform(3, 1, 17, 2) == decision_uniform(3, 1, 17, 2)
    assert decision_uniform(3, 1, 17, 2) != decision_uniform(3, 1, 17, 3)
    assert decision_uniform(3, 1, 17, 2) != decision_uniform(3, 2, 17, 2)
    draws = np.array([decision_uniform(0, 1, i, e) for i in range(4000) for e in range(3)])  # [12000]
    assert draws.min() >= 0.0 and draws.max() < 1.0
    counts = np.histogram(draws, bins=10, range=(0, 1))[0]  # ~1200 each, sd ~33
    assert np.all(np.abs(counts - 1200) < 150)
