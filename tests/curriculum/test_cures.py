"""CurES (arXiv 2510.01037): Beta posteriors, the posterior-weighted epoch order and the
posterior-sized first request, against simulated policies with known pass rates.

Legend: N responses per group, N_init the smallest first request, p_hat = (1 + c) / (2 + c + w)
the posterior mean, weight exp(sqrt(p_hat (1 - p_hat)) / tau).
"""

import collections
import math

import numpy as np
import pytest

from openrlhf_speed.curriculum import PromptHistory, SpeedConfig
from openrlhf_speed.curriculum.history_strategies import CuresStrategy
from openrlhf_speed.curriculum.simulate import run_simulation

RATES = np.repeat([0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0], 20)  # [140]


def cures_cfg(**kw):
    base = dict(strategy="cures", n_samples_per_prompt=8, n_init=2, batch_prompts=4, warn_qualification_rate=0.0)
    base.update(kw)
    return SpeedConfig(**base).validate()


@pytest.mark.parametrize("p_hat, m", [(0.5, 8), (0.3, 7), (0.1, 5), (0.02, 2), (0.0, 2), (0.98, 2), (0.9, 5)])
def test_first_request_size_hand_computed(p_hat, m):
    # m = clip(round(8 * 2 * sqrt(p (1 - p))), 2, 8): 0.3 -> 7.33, 0.1 -> 4.8, 0.02 -> 2.24
    assert CuresStrategy(cures_cfg()).first_request_size(p_hat) == m


def test_unseen_prompts_screen_with_n_init_and_confident_ones_stay_small():
    s = CuresStrategy(cures_cfg())
    h = PromptHistory(3)
    assert (s.start(0, h).n, s.start(0, h).phase) == (2, "screen")
    h.record(1, 0, 10, 20)  # p_hat = 0.5: all N at once
    h.record(2, 0, 0, 40)  # p_hat = 1/42
    assert (s.start(1, h).n, s.start(1, h).phase) == (8, "full")
    assert (s.start(2, h).n, s.start(2, h).phase) == (2, "screen")


def test_order_is_a_weighted_draw_without_replacement():
    # The first prompt of an epoch is prompt i with probability softmax(logits)_i.
    tau = 0.5
    s = CuresStrategy(cures_cfg(cures_temperature=tau, seed=7))
    h = PromptHistory(3)
    for i, (c, w) in enumerate([(50, 50), (10, 90), (0, 100)]):
        h.record(i, 0, c, c + w)
    p_hat = np.array([51 / 102, 11 / 102, 1 / 102])
    logits = np.sqrt(p_hat * (1 - p_hat)) / tau
    expected = np.exp(logits) / np.exp(logits).sum()  # ~[0.51, 0.33, 0.16]
    trials = 3000
    firsts = collections.Counter(int(s.order_epoch(e, np.arange(3), h)[0]) for e in range(1, trials + 1))
    for i in range(3):
        sd = math.sqrt(expected[i] * (1 - expected[i]) / trials)
        assert abs(firsts[i] / trials - expected[i]) < 4 * sd
    assert sorted(s.order_epoch(5, np.arange(3), h)) == [0, 1, 2]  # a permutation


def test_posterior_means_converge_to_the_true_pass_rates():
    errors = {}
    for epochs in (2, 12):
        res = run_simulation(RATES, cures_cfg(num_epochs=epochs, seed=1), seed=3, completions_per_tick=16)
        c, w = res.scheduler.history.counts_all(epochs)  # [140] each
        a, b = 1 + c, 1 + w
        mean = a / (a + b)
        sd = np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
        errors[epochs] = np.abs(mean - RATES)
        if epochs == 12:  # calibrated: the truth sits within 3 posterior sd almost always
            assert np.mean(errors[epochs] <= 3 * sd + 1e-9) >= 0.97
    assert errors[12].mean() < 0.05 and errors[12].mean() < 0.6 * errors[2].mean()


def test_sampling_prefers_prompts_near_one_half():
    # From epoch 3 the posteriors (two or three screenings of 2) separate the classes.
    res = run_simulation(RATES, cures_cfg(num_epochs=6, seed=2), seed=4, completions_per_tick=16)
    firsts = [r for r in res.requests if r.phase != "continue"]
    for epoch in (3, 4, 5):
        order = [r.prompt_index for r in firsts if r.epoch == epoch]
        assert sorted(order) == list(range(len(RATES)))  # every prompt once an epoch, none skipped
        rank = {p: np.mean([k for k, i in enumerate(order) if RATES[i] == p]) for p in (0.0, 0.5, 1.0)}
        assert rank[0.5] < 0.6 * rank[0.0] and rank[0.5] < 0.6 * rank[1.0]
        head = [RATES[i] for i in order[:40]]
        assert np.mean([0.1 <= p <= 0.9 for p in head]) > 0.9  # 5/7 of the prompts are mid


def test_allocation_keeps_exactly_n_per_group_and_sizes_follow_the_posterior():
    res = run_simulation(RATES, cures_cfg(num_epochs=6, seed=3), seed=5, completions_per_tick=9)
    sizes = collections.defaultdict(list)  # (epoch, p) -> first request sizes
    for r in res.requests:
        if r.phase != "continue":
            sizes[r.epoch, float(RATES[r.prompt_index])].append(r.n)
    size = {k: np.mean(v) for k, v in sizes.items()}
    assert all(size[0, p] == 2 for p in (0.0, 0.5, 1.0))  # unseen: N_init
    # Certain prompts shrink to (almost) N_init as their posterior sharpens; p = 0.5 gets all N.
    assert size[2, 0.0] > size[3, 0.0] > size[5, 0.0] <= 3 and size[5, 1.0] <= 3
    assert size[5, 0.0] < size[5, 0.1] < size[5, 0.3] < size[5, 0.5] and size[5, 0.5] > 7.5
    for b in res.batches:
        assert b.rewards().shape == (4, 8)
        for g in b.groups:
            payloads = [r.payload for r in g.responses]  # (prompt, request_id, phase, j)
            assert {p[0] for p in payloads} == {g.prompt_index} and 2 <= g.n_screen <= 8
            first, rest = payloads[: g.n_screen], payloads[g.n_screen:]
            assert len({p[1] for p in first}) == 1 and [p[3] for p in first] == list(range(g.n_screen))
            assert {p[2] for p in first} == ({"full"} if g.n_screen == 8 else {"screen"})
            assert all(p[2] == "continue" for p in rest)
            assert 0 < g.rewards[: g.n_screen].mean() < 1  # qualified on its first request
