"""curriculum/posterior.py against hand-computed Beta-Binomial cases and closed forms.

Hand case used throughout: p ~ Beta(1, 3), n = 2. P(k) = C(2, k) B(1 + k, 5 - k) / B(1, 3),
B(1, 3) = 1/3: P(0) = (1/5) * 3 = 0.6, P(1) = 2 * B(2, 4) * 3 = 2 * (1/20) * 3 = 0.3,
P(2) = B(3, 3) * 3 = (1/30) * 3 = 0.1.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrlhf_speed.curriculum import posterior


def _one(alpha, beta, samples=2):
    """Posteriors of prompts with one Beta each."""
    alpha, beta = np.atleast_1d(alpha).astype(float), np.atleast_1d(beta).astype(float)
    return posterior.Posteriors(alpha[:, None], beta[:, None], np.ones((len(alpha), 1)), ((1.0, 1.0, 1.0),), "uniform",
                                samples)


def test_lgamma_matches_math():
    xs = np.array([0.01, 0.3, 0.5, 1.0, 2.5, 17.0, 123.4, 5000.0])
    assert np.allclose(posterior.lgamma(xs), [math.lgamma(x) for x in xs], rtol=1e-12, atol=1e-12)


def test_betabinom_hand_case():
    assert np.allclose(posterior.betabinom_pmf(2, 1.0, 3.0), [0.6, 0.3, 0.1])
    # A flat prior predicts every count alike: 1 / (n + 1).
    assert np.allclose(posterior.betabinom_pmf(4, 1.0, 1.0), [0.2] * 5)
    # Beta(1, 3), n = 4: P(0) = B(1, 7) / B(1, 3) = 3/7, P(4) = B(5, 3) / B(1, 3) = 1/35.
    assert _one(1.0, 3.0).prob_zero_variance(4)[0] == pytest.approx(3 / 7 + 1 / 35)


def test_bands_are_strict_like_the_scheduler():
    assert posterior.band_mask(4, 0.0, 1.0).tolist() == [False, True, True, True, False]
    assert posterior.band_mask(4, 0.25, 0.75).tolist() == [False, False, True, False, False]  # 1/4 and 3/4 are out
    assert _one(1.0, 3.0).prob_in_band(2, 0.0, 1.0)[0] == pytest.approx(0.3)
    assert _one(1.0, 3.0).prob_in_band(1, 0.0, 1.0)[0] == 0.0  # one sample is never mixed


def test_mean_pq_and_its_part_inside_the_band():
    assert posterior.mean_pq(1.0, 1.0) == pytest.approx(1 / 6)  # E[p - p^2] = 1/2 - 1/3
    assert posterior.mean_pq(1.0, 3.0) == pytest.approx(3 / 20)
    # Beta(1, 1), n = 2: only k = 1 is in (0, 1); P = 1/3, then Beta(2, 2) has E[pq] = 1/5.
    # Directly: E[p(1-p) * 2p(1-p)] = 2 B(3, 3) = 1/15.
    assert _one(1.0, 1.0).pq_in_band(2, 0.0, 1.0)[0] == pytest.approx(1 / 15)
    # Beta(1, 3): P(k = 1) = 0.3, then Beta(2, 4) has E[pq] = 8 / 42.
    assert _one(1.0, 3.0).pq_in_band(2, 0.0, 1.0)[0] == pytest.approx(0.3 * 8 / 42)


def test_beta_cdf_matches_closed_forms():
    for x in (0.05, 0.3, 0.5, 0.77, 0.99):
        assert posterior.beta_cdf(x, 1, 1) == pytest.approx(x)
        assert posterior.beta_cdf(x, 2, 1) == pytest.approx(x ** 2)
        assert posterior.beta_cdf(x, 1, 3) == pytest.approx(1 - (1 - x) ** 3)
        assert posterior.beta_cdf(x, 0.5, 0.5) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)))
    assert posterior.beta_cdf(0.0, 0.3, 2) == 0.0 and posterior.beta_cdf(1.0, 0.3, 2) == 1.0
    assert posterior.beta_quantile(0.5, 2, 2) == pytest.approx(0.5)
    assert posterior.beta_quantile(0.25, 2, 1) == pytest.approx(0.5)  # x^2 = 1/4


def test_posteriors_from_counts_with_a_named_prior():
    post = posterior.Posteriors.from_counts([0, 3], samples=4, prior="uniform")
    assert post.alpha[:, 0].tolist() == [1.0, 4.0] and post.beta[:, 0].tolist() == [5.0, 2.0]
    assert post.mean.tolist() == pytest.approx([1 / 6, 4 / 6])
    assert post.cdf(0.3)[0] == pytest.approx(1 - 0.7 ** 5)  # Beta(1, 5)
    with pytest.raises(ValueError, match="prior 'flat'"):
        posterior.Posteriors.from_counts([0], samples=4, prior="flat")


def test_a_mixture_posterior_reweights_its_components_by_the_evidence():
    # Prior 1/2 Beta(1, 3) + 1/2 Beta(3, 1), one sample correct: the components' evidence is
    # their mean, 1/4 and 3/4, so the weights become 1/4 and 3/4; the posteriors Beta(2, 3), Beta(4, 1).
    w, a, b = np.array([0.5, 0.5]), np.array([1.0, 3.0]), np.array([3.0, 1.0])
    log_w = np.log(w) + posterior.log_beta(a + 1, b) - posterior.log_beta(a, b)
    weight = np.exp(log_w) / np.exp(log_w).sum()
    assert weight.tolist() == pytest.approx([0.25, 0.75])
    post = posterior.Posteriors((a + 1)[None], b[None], weight[None], ((0.5, 1, 3), (0.5, 3, 1)), "mixture", 1)
    assert post.mean[0] == pytest.approx(0.25 * 2 / 5 + 0.75 * 4 / 5)
    assert post.predictive(1)[0].tolist() == pytest.approx([0.25 * 3 / 5 + 0.75 * 1 / 5, 0.25 * 2 / 5 + 0.75 * 4 / 5])


def test_the_fitted_prior_recovers_the_one_that_made_the_data():
    rng = np.random.default_rng(0)
    correct = rng.binomial(16, rng.beta(0.3, 0.6, size=20000))
    [(w, a, b)] = posterior.fit_prior(correct, 16)
    assert w == 1.0 and a == pytest.approx(0.3, rel=0.1) and b == pytest.approx(0.6, rel=0.1)
    # A set solved by nobody ends on the search box's edge, where the data put it.
    [(_, a, _)] = posterior.fit_prior(np.zeros(50, dtype=int), 16)
    assert a == pytest.approx(0.01)


def test_a_mixture_keeps_both_ends_where_one_beta_bends_them():
    # A third never solved (p = 0.01), a third always (p = 0.995), a third in the middle.
    rng = np.random.default_rng(1)
    p = np.concatenate([np.full(400, 0.01), np.full(400, 0.995), rng.uniform(0.2, 0.7, 400)])
    truth_always = np.mean(np.concatenate([np.full(400, 0.01 ** 24), np.full(400, 0.995 ** 24), np.zeros(400)]))
    correct = rng.binomial(16, p)
    shares = {prior: posterior.outcome_shares(24, posterior.Posteriors.from_counts(correct, 16, prior))["always"]
              ["share"] for prior in ("mixture", "beta")}
    assert abs(shares["mixture"] - truth_always) < 0.03 < abs(shares["beta"] - truth_always)


def test_outcome_shares_hand_case():
    shares = posterior.outcome_shares(2, _one(1.0, 3.0))
    assert shares["never"]["share"] == pytest.approx(0.6)
    assert shares["some"]["share"] == pytest.approx(0.3)
    assert shares["always"]["share"] == pytest.approx(0.1)
    assert shares["never"]["sd"] == pytest.approx(math.sqrt(0.6 * 0.4))


def test_posterior_histogram_hand_case():
    # Prior Beta(1, 1), screening 0 of 2: Beta(1, 3), cdf 1 - (1 - x)^3; [0, 0.1) holds 1 - 0.9^3.
    post = posterior.Posteriors.from_counts([0, 2], samples=2, prior="uniform")
    rows = posterior.posterior_histogram(post, [0, 2])
    assert [r["observed"] for r in rows] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]  # rate 1 falls in the closed last bin
    assert rows[0]["expected"] == pytest.approx((1 - 0.9 ** 3) + 0.1 ** 3)  # Beta(3, 1) puts x^3 there
    assert sum(r["expected"] for r in rows) == pytest.approx(2.0)
    assert rows[0]["bin"] == "[0.0,0.1)" and rows[-1]["bin"] == "[0.9,1.0]"


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), a=st.floats(0.02, 50), b=st.floats(0.02, 50))
def test_pmf_is_a_distribution_and_shares_add_up(n, a, b):
    pmf = posterior.betabinom_pmf(n, a, b)
    assert (pmf >= 0).all() and pmf.sum() == pytest.approx(1.0, abs=1e-9)
    # The mean of a Beta-Binomial is n a / (a + b).
    assert (pmf * np.arange(n + 1)).sum() == pytest.approx(n * a / (a + b), rel=1e-7, abs=1e-9)
    if n >= 2:
        shares = posterior.outcome_shares(n, _one(a, b))
        assert sum(v["share"] for v in shares.values()) == pytest.approx(1.0, abs=1e-9)


def test_the_holdout_check_on_a_known_mixture():
    # Prompts at p = 0 or 1 exactly are all wrong or all right on any held-out half.
    outcomes = [[0] * 8] * 30 + [[1] * 8] * 30 + [[0, 1] * 4] * 40
    h = posterior.holdout_check(outcomes, "mixture")
    assert (h["fitted_on"], h["predicted_on"]) == (4, 4)
    assert h["observed_zero_variance"] == pytest.approx(0.6)
    assert h["predicted_zero_variance"] == pytest.approx(0.6, abs=0.08)
