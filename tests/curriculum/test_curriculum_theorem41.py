"""Theorem 4.1 of SPEED-RL (arXiv 2506.09016), checked numerically through the Scheduler.

Claim: with the RLOO estimator, SPEED's expected update for a prompt of pass rate p is
Phi'(p) * grad p for a positive Phi' (so SPEED ascends E[Phi(p)] with Phi increasing, and
the optimum p = 1 is unchanged). We could not read the paper's Appendix B here, so the
quantity is derived and stated precisely below, for the groups this project trains.

Derivation. N responses y_1..y_N, binary rewards r_i ~ Bernoulli(p), the first n = N_init
are the screening, m = N - n the continuation, K = correct screenings, S = all correct.
RLOO exactly as OpenRLHF 0.11.2 computes it on a [P, N] reward array:
    baseline_i = (sum_j r_j - r_i) / (N - 1),  A_i = r_i - baseline_i = (N r_i - S)/(N - 1).
The estimator is g = 1{trained} * sum_i A_i grad log pi(y_i). Given the rewards the
responses are independent, and for any policy E[grad log pi(y) | r] = grad p * (r - p) /
(p (1 - p)) (because E[grad log pi(y) 1{r=1}] = grad p and E[grad log pi(y)] = 0).
Hence E[g] = c(p) grad p with
    c(p) = E[1{trained} sum_i A_i (r_i - p)] / (p (1 - p))
         = E[1{trained} S (N - S)] / ((N - 1) p (1 - p))          (sum_i A_i = 0),
and Phi'(p) = c(p). (For the Bernoulli-logit policy pi(correct) = sigmoid(theta) the score
is exactly r - p, which is what the Monte Carlo below uses: it is a real policy gradient.)
- uniform (no filter): E[S(N-S)] = N(N-1)p(1-p), so c = N: plain RLOO is unbiased.
- dapo (keep 0 < S < N): S(N-S) vanishes on discarded groups, so c = N as well.
- speed trained on all N (this project): trained iff 0 < K < n. With
  E[M(N-M)] = m p (n + (m-1)(1-p)) for M ~ Bin(m, p) and its mirror image,
      c(p) = [N(N-1) - m (1-p)^(n-1) (n + (m-1)(1-p)) - m p^(n-1) (n + (m-1) p)] / (N-1),
  a ratio of non-negative expectations, > 0 on (0, 1): Phi is increasing. It tends to n at
  p -> 0 and p -> 1 (a trained group then holds its one odd screening response).
- speed with RLOO over the m continuation responses only (independent of the filter):
      c(p) = m (1 - p^n - (1-p)^n),
  the "Phi' = probability that screening is mixed" form.
Each closed form is checked against exact enumeration, then against a Monte Carlo run
through the project's Scheduler and simulated policy, within 4 standard errors.

With the trainer's staleness bound (`max_staleness`, flag default 2; SpeedConfig's default
is None, the paper's unbounded algorithm used above) a qualified group that ages past the
bound is screened again. The decision depends on timing, not on the group's rewards, so a
group that trains is distributed as without the bound: E[g | trained] = c(p) / P(0<K<n).
But fewer visits train (a re-screen may fail), so per visit Phi'(p) = c(p) s(p), with
s = P(trained) / P(0<K<n) < 1; if a qualified screening goes stale with probability q,
s = (1-q) / (1-q P(0<K<n)), which depends on p (it favours p near 1/2) and on the
scheduling. Phi stays increasing (s > 0) but its shape changes; the last test checks this.
"""

import math

import numpy as np
import pytest

from openrlhf_speed.curriculum import SpeedConfig
from openrlhf_speed.curriculum.simulate import run_simulation

N, N_INIT = 8, 4
PS = (0.1, 0.3, 0.5, 0.8)
PROMPTS = 3000  # per p: standard errors ~1% of c(p)


def rloo_advantages(rewards):
    """OpenRLHF 0.11.2's RLOO on rewards [P, G] -> advantages [P, G]."""
    g = rewards.shape[-1]
    baseline = (rewards.sum(-1, keepdims=True) - rewards) / (g - 1)
    return rewards - baseline


def c_speed_full(p, n_total=N, n=N_INIT):
    m = n_total - n
    return (n_total * (n_total - 1)
            - m * (1 - p) ** (n - 1) * (n + (m - 1) * (1 - p))
            - m * p ** (n - 1) * (n + (m - 1) * p)) / (n_total - 1)


def c_speed_continuation(p, n_total=N, n=N_INIT):
    return (n_total - n) * (1 - p ** n - (1 - p) ** n)


def binom(k, n, p):
    return math.comb(n, k) * p ** k * (1 - p) ** (n - k)


def c_enumerated(p, trained, n_total=N, n=N_INIT):
    """E[1{trained(K, S)} S (N - S)] / ((N-1) p (1-p)) by summing over K and M."""
    m = n_total - n
    total = sum(
        binom(k, n, p) * binom(j, m, p) * (k + j) * (n_total - k - j)
        for k in range(n + 1) for j in range(m + 1) if trained(k, k + j)
    )
    return total / ((n_total - 1) * p * (1 - p))


@pytest.mark.parametrize("p", [0.05, 0.2, 0.5, 0.7, 0.95])
def test_closed_forms_match_enumeration(p):
    assert c_speed_full(p) == pytest.approx(c_enumerated(p, lambda k, s: 0 < k < N_INIT), rel=1e-12)
    assert c_enumerated(p, lambda k, s: True) == pytest.approx(N, rel=1e-12)
    assert c_enumerated(p, lambda k, s: 0 < s < N) == pytest.approx(N, rel=1e-12)


def test_phi_is_increasing():
    grid = np.linspace(1e-3, 1 - 1e-3, 999)
    for c in (c_speed_full, c_speed_continuation):
        assert np.all(c(grid) > 0)
    assert c_speed_full(1e-9) == pytest.approx(N_INIT, rel=1e-6)


def trained_values(p, strategy, continuation_only=False, seed=0, max_staleness=None,
                   completions_per_tick=None):
    """sum_i A_i (r_i - p) / (p (1-p)) of each trained group [trained], and the totals."""
    cfg = SpeedConfig(n_samples_per_prompt=N, n_init=N_INIT, batch_prompts=1,
                      max_inflight_prompts=64, strategy=strategy, seed=seed,
                      warn_qualification_rate=0.0, max_staleness=max_staleness)
    res = run_simulation([p] * PROMPTS, cfg, seed=seed, completions_per_tick=completions_per_tick)
    totals = res.scheduler.totals()
    assert totals["groups_dropped_at_end"] == 0  # B = 1: nothing dropped
    rewards = np.stack([g.rewards for b in res.batches for g in b.groups])  # [trained, N]
    if continuation_only:
        rewards = rewards[:, N_INIT:]  # [trained, N - N_INIT]
    return (rloo_advantages(rewards) * (rewards - p)).sum(-1) / (p * (1 - p)), totals


def monte_carlo(p, strategy, continuation_only=False, seed=0):
    """Per screened prompt: sum_i A_i (r_i - p) / (p (1-p)), zero if not trained.
    Returns (mean, standard error) over PROMPTS prompts of pass rate p."""
    per_group, _ = trained_values(p, strategy, continuation_only, seed)  # [trained]
    values = np.zeros(PROMPTS)  # [prompts]; untrained prompts contribute 0
    values[: len(per_group)] = per_group
    return values.mean(), values.std(ddof=1) / math.sqrt(PROMPTS)


@pytest.mark.parametrize("p", PS)
def test_speed_rloo_expected_gradient_matches_phi_prime(p):
    mean, se = monte_carlo(p, "speed", seed=1)
    assert abs(mean - c_speed_full(p)) < 4 * se, (mean, c_speed_full(p), se)
    mean, se = monte_carlo(p, "speed", continuation_only=True, seed=2)
    assert abs(mean - c_speed_continuation(p)) < 4 * se, (mean, c_speed_continuation(p), se)


@pytest.mark.parametrize("strategy", ["uniform", "dapo"])
def test_unfiltered_and_dapo_rloo_are_unbiased(strategy):
    mean, se = monte_carlo(0.3, strategy, seed=3)
    assert abs(mean - N) < 4 * se, (mean, se)


@pytest.mark.parametrize("p", PS)
def test_staleness_bound_keeps_trained_groups_unbiased_but_trains_fewer(p):
    # Bound 2, scrambled completions (8 a tick for 64 in flight, one version per batch of 1):
    # half to three quarters of the qualified screenings go stale (module docstring).
    per_group, totals = trained_values(p, "speed", seed=5, max_staleness=2, completions_per_tick=8)
    qualify = 1 - p ** N_INIT - (1 - p) ** N_INIT  # P(0 < K < n)
    se = per_group.std(ddof=1) / math.sqrt(len(per_group))
    assert abs(per_group.mean() - c_speed_full(p) / qualify) < 4 * se  # E[g | trained]
    rescreened = totals["prompts_rescreened_stale"]
    assert rescreened > 0.3 * len(per_group)  # the bound acted
    # Per visit, Phi' = c(p) s(p) with s = P(trained) / P(qualify) = (1-q) / (1-q qualify):
    # positive, well below 1 here, and as the stale share q predicts (q varies over the run).
    s = len(per_group) / (PROMPTS * qualify)
    q = rescreened / (rescreened + len(per_group))  # qualified screenings that went stale
    assert 0 < s < 0.85 and s == pytest.approx((1 - q) / (1 - q * qualify), abs=0.05)
