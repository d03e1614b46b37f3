"""Per-prompt pass-rate posteriors from a screening, and what they predict at other group sizes.

A screening gives prompt i `s_i` correct of S responses. Its true pass rate p_i gets a Beta
posterior: with a prior sum_j w_j Beta(a_j, b_j), the posterior is sum_j w_ij Beta(a_j + s_i,
b_j + S - s_i), w_ij proportional to w_j times the Beta-Binomial chance of s_i under component
j. The prior is fitted to all the screened prompts at once by maximum marginal (Beta-Binomial)
likelihood (empirical Bayes): by default a mixture of Betas on a grid of means, the weights
fitted by EM (`fit_grid_prior`). Why fitted, and why a mixture: RL prompt sets pile up at pass
rates 0 and 1 (the paper's Fig. 2) with a spread between. A flat prior gives a prompt never
solved in 16 samples a 41% chance of being all wrong at N = 24, far below what such sets
show; one Beta fitted to the U shape bends both ends toward the middle (a prompt solved 16 of
16 gets about a 2 in 3 chance of 24 of 24); the mixture keeps each end, and the spread, where the
data put them (docs/advise.md compares the priors).

The rule not to break: every prediction integrates over the posterior. The chance that n new
samples hold k correct is the (mixture) Beta-Binomial pmf; no prediction plugs in s_i / S.
Band checks use `low < k / n < high`, the scheduler's `qualify` on the same counts.

Shapes: [P] prompts, [P, J] per prompt and prior component, [..., n + 1] per count k = 0..n.
Only numpy and math.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Priors a user may pick (`--prior`): fitted (a grid mixture of Betas, or one Beta), or a named Beta.
FITTED = ("mixture", "beta")
FIXED_PRIORS = {"jeffreys": (0.5, 0.5), "uniform": (1.0, 1.0)}
# The mixture's component means and the concentrations a_j + b_j it chooses from; the end
# components are Beta(0.05, c) and Beta(c, 0.05): nearly all their mass at 0 or at 1.
GRID_MEANS = np.linspace(0.0, 1.0, 21)
CONCENTRATIONS = (4.0, 8.0, 16.0, 32.0, 64.0)
_END_SHAPE = 0.05
# The fit's search box for each a and b (log10), and its zoom: a coarse grid, then finer ones.
_LOG10_RANGE = (-2.0, 2.0)
_GRID_POINTS = 41
_ZOOMS = 4
_EM_ITERATIONS = 300
# Lanczos' approximation of the gamma function (g = 7, 9 terms: ~15 digits).
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def lgamma(x):
    """log Gamma(x) for x > 0, elementwise (math.lgamma is scalar-only)."""
    x = np.asarray(x, dtype=float)
    small = x < 0.5
    z = np.where(small, x + 1.0, x) - 1.0  # Gamma(x) = Gamma(x + 1) / x below 0.5
    series = _LANCZOS[0] + sum(c / (z + i) for i, c in enumerate(_LANCZOS[1:], start=1))
    t = z + 7.5
    out = 0.5 * math.log(2 * math.pi) + (z + 0.5) * np.log(t) - t + np.log(series)
    return np.where(small, out - np.log(x), out)


def log_beta(a, b):
    """log B(a, b), elementwise."""
    return lgamma(a) + lgamma(b) - lgamma(np.asarray(a) + np.asarray(b))


def betabinom_pmf(n: int, alpha, beta) -> np.ndarray:
    """P(k of n correct), k = 0..n, when p ~ Beta(alpha, beta). [..., n + 1] for [...] parameters."""
    a, b = np.asarray(alpha, dtype=float)[..., None], np.asarray(beta, dtype=float)[..., None]
    k = np.arange(n + 1)
    log_choose = lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0)
    return np.exp(log_choose + log_beta(a + k, b + n - k) - log_beta(a, b))


def band_mask(n: int, low: float, high: float) -> np.ndarray:
    """Counts k = 0..n whose pass rate k / n lies strictly inside (low, high). [n + 1]"""
    return np.array([low < k / n < high for k in range(n + 1)])


def mean_pq(alpha, beta):
    """E[p (1 - p)] under Beta(alpha, beta): the quantity behind the paper's Theorem 3.1."""
    alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    s = alpha + beta
    return alpha * beta / (s * (s + 1.0))


def _fit_component(counts: np.ndarray, samples: int) -> tuple[float, float]:
    """(a, b) maximising sum_k counts[k] log BetaBinomial(k | S, a, b) on a zooming log grid."""
    k = np.arange(samples + 1)
    used = counts > 0
    lo, hi = _LOG10_RANGE
    center, half = ((lo + hi) / 2, (lo + hi) / 2), (hi - lo) / 2
    for _ in range(_ZOOMS):
        axis_a = np.clip(np.linspace(center[0] - half, center[0] + half, _GRID_POINTS), lo, hi)
        axis_b = np.clip(np.linspace(center[1] - half, center[1] + half, _GRID_POINTS), lo, hi)
        a = 10.0 ** axis_a[:, None, None]  # [G, 1, 1]
        b = 10.0 ** axis_b[None, :, None]  # [1, G, 1]
        ll = ((log_beta(a + k[used], b + samples - k[used]) - log_beta(a, b)) * counts[used]).sum(-1)  # [G, G]
        i, j = np.unravel_index(np.argmax(ll), ll.shape)
        center, half = (axis_a[i], axis_b[j]), half * 4 / (_GRID_POINTS - 1)
    return float(10.0 ** center[0]), float(10.0 ** center[1])


def fit_prior(correct, samples: int) -> list[tuple[float, float, float]]:
    """[(1, a, b)]: the one Beta that maximises the Beta-Binomial likelihood of the counts
    `correct` [P] of `samples` each, a and b in [0.01, 100] (a set with every prompt at 0 ends
    on that box's edge, as it should)."""
    counts = np.bincount(np.asarray(correct, dtype=int), minlength=samples + 1).astype(float)  # [S + 1]
    return [(1.0, *_fit_component(counts, samples))]


def fit_grid_prior(correct, samples: int) -> tuple[list[tuple[float, float, float]], float]:
    """([(w_j, a_j, b_j)], concentration): a mixture of Betas whose means sit on a grid from 0 to 1
    (GRID_MEANS) with one concentration c (a_j + b_j = c, the ends kept at 0.05), whose weights
    maximise the Beta-Binomial likelihood of the counts (EM: the weights only, a convex problem
    with one optimum), for the c in CONCENTRATIONS with the highest likelihood. A histogram
    of the pass rates, smoothed as much as the data ask, that can hold mass at both ends."""
    counts = np.bincount(np.asarray(correct, dtype=int), minlength=samples + 1).astype(float)  # [S + 1]
    k = np.arange(samples + 1)
    best = None
    for c in CONCENTRATIONS:
        a = np.maximum(GRID_MEANS * c, _END_SHAPE)
        b = np.maximum((1 - GRID_MEANS) * c, _END_SHAPE)
        lik = np.exp(log_beta(a[:, None] + k, b[:, None] + samples - k) - log_beta(a, b)[:, None])  # [J, S + 1]
        w = np.full(len(a), 1.0 / len(a))
        for _ in range(_EM_ITERATIONS):
            joint = w[:, None] * lik
            w = (joint / joint.sum(0) * counts).sum(1) / counts.sum()
        loglik = float((np.log((w[:, None] * lik).sum(0)) * counts).sum())
        if best is None or loglik > best[0]:
            best = (loglik, [(float(wj), float(aj), float(bj)) for wj, aj, bj in zip(w, a, b)], c)
    return best[1], best[2]


@dataclass(frozen=True)
class Posteriors:
    """Per prompt, a mixture of Beta(alpha_ij, beta_ij) with weights weight_ij (J = 1: one Beta)."""

    alpha: np.ndarray  # [P, J]
    beta: np.ndarray  # [P, J]
    weight: np.ndarray  # [P, J], rows sum to 1
    prior: tuple  # ((w_j, a_j, b_j), ...)
    prior_name: str  # "mixture", "beta", "jeffreys", "uniform"
    samples: int  # S
    concentration: float | None = None  # the mixture's a_j + b_j

    @classmethod
    def from_counts(cls, correct, samples: int, prior: str = "mixture") -> "Posteriors":
        correct = np.asarray(correct, dtype=float)  # [P]
        concentration = None
        if prior == "mixture":
            mix, concentration = fit_grid_prior(correct, samples)
        elif prior == "beta":
            mix = fit_prior(correct, samples)
        elif prior in FIXED_PRIORS:
            mix = [(1.0, *FIXED_PRIORS[prior])]
        else:
            raise ValueError(f"prior {prior!r} is not one of: {', '.join([*FITTED, *FIXED_PRIORS])}")
        w, a, b = (np.array(v, dtype=float) for v in zip(*mix))  # [J] each
        alpha, beta = a + correct[:, None], b + samples - correct[:, None]  # [P, J]
        log_w = np.log(np.maximum(w, 1e-300)) + log_beta(alpha, beta) - log_beta(a, b)
        weight = np.exp(log_w - log_w.max(1, keepdims=True))
        return cls(alpha, beta, weight / weight.sum(1, keepdims=True), tuple(mix), prior, samples, concentration)

    def select(self, index) -> "Posteriors":
        """The posteriors of the prompts at `index`."""
        return Posteriors(self.alpha[index], self.beta[index], self.weight[index], self.prior, self.prior_name,
                          self.samples, self.concentration)

    @property
    def mean(self) -> np.ndarray:
        return (self.weight * self.alpha / (self.alpha + self.beta)).sum(1)

    def predictive(self, n: int) -> np.ndarray:
        """P(k of n new samples correct), k = 0..n. [P, n + 1]"""
        return (self.weight[..., None] * betabinom_pmf(n, self.alpha, self.beta)).sum(1)

    def prob_in_band(self, n: int, low: float, high: float) -> np.ndarray:
        """Chance that n new samples pass the band (SPEED's screening, DAPO's filter). [P]"""
        return self.predictive(n)[:, band_mask(n, low, high)].sum(1)

    def prob_zero_variance(self, n: int) -> np.ndarray:
        """Chance that a group of n is all wrong or all right (no gradient with a group baseline). [P]"""
        pmf = self.predictive(n)
        return pmf[:, 0] + pmf[:, n]

    def mean_pq(self) -> np.ndarray:
        """E[p (1 - p)] of each prompt. [P]"""
        return (self.weight * mean_pq(self.alpha, self.beta)).sum(1)

    def pq_in_band(self, n: int, low: float, high: float) -> np.ndarray:
        """E[p (1 - p) ; n new samples pass the band]: after k correct a component is
        Beta(alpha + k, beta + n - k), weighted by the chance of k. Divide by prob_in_band for
        the mean over the prompts that pass. [P]"""
        k = np.arange(n + 1)
        after = mean_pq(self.alpha[..., None] + k, self.beta[..., None] + n - k)  # [P, J, n + 1]
        part = betabinom_pmf(n, self.alpha, self.beta) * after * band_mask(n, low, high)
        return (self.weight * part.sum(-1)).sum(1)

    def cdf(self, x: float) -> np.ndarray:
        """P(p_i <= x). [P]"""
        per = np.vectorize(beta_cdf, otypes=[float])(x, self.alpha, self.beta)  # [P, J]
        return (self.weight * per).sum(1)


def outcome_shares(n: int, post: Posteriors) -> dict:
    """Expected shares of prompts never / sometimes / always solved by n new samples, each
    with its standard deviation over the posterior (a sum of independent Bernoullis)."""
    pmf = post.predictive(n)  # [P, n + 1]
    parts = {"never": pmf[:, 0], "some": pmf[:, 1:n].sum(1), "always": pmf[:, n]}
    size = len(pmf)
    return {name: {"share": float(p.mean()), "sd": float(math.sqrt((p * (1 - p)).sum()) / size)}
            for name, p in parts.items()}


def posterior_histogram(post: Posteriors, correct, edges=tuple(i / 10 for i in range(11))) -> list[dict]:
    """Per bin [lo, hi) of the pass rate (the last bin closed): the prompts whose screening rate
    falls in it, and the expected number whose true rate does, with its sd."""
    rates = np.asarray(correct, dtype=float) / post.samples
    cdf = np.stack([post.cdf(x) for x in edges], axis=1)  # [P, bins + 1]
    probs = np.diff(cdf, axis=1)  # [P, bins]
    rows = []
    for j, (lo, hi) in enumerate(zip(edges, edges[1:])):
        last = j == len(edges) - 2
        observed = int(np.sum((rates >= lo) & ((rates <= hi) if last else (rates < hi))))
        p = probs[:, j]
        rows.append({"bin": f"[{lo:.1f},{hi:.1f}{']' if last else ')'}", "observed": observed,
                     "expected": float(p.sum()), "sd": float(math.sqrt((p * (1 - p)).sum()))})
    return rows


def holdout_check(outcomes, prior: str, n: int | None = None) -> dict:
    """How well the posterior predicts unseen samples, on the screening itself: fitted on each
    prompt's first S - n samples, the predicted share of prompts whose last n are all wrong or
    all right against the share observed (n: S // 2 by default)."""
    outcomes = np.asarray(outcomes, dtype=int)  # [P, S]
    n = n or outcomes.shape[1] // 2
    seen, unseen = outcomes[:, :-n].sum(1), outcomes[:, -n:].sum(1)
    post = Posteriors.from_counts(seen, outcomes.shape[1] - n, prior)
    return {"fitted_on": outcomes.shape[1] - n, "predicted_on": n,
            "predicted_zero_variance": float(post.prob_zero_variance(n).mean()),
            "observed_zero_variance": float(np.mean((unseen == 0) | (unseen == n)))}


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularised incomplete beta I_x(a, b), by its continued fraction (Lentz's method)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    # The fraction converges fast below about the mean; use the symmetry I_x(a, b) = 1 - I_1-x(b, a) above.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float, iterations: int = 500, eps: float = 1e-15) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, iterations + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def beta_quantile(q: float, a: float, b: float) -> float:
    """The x with I_x(a, b) = q, by bisection (60 halvings: below 1e-15)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
