"""History-based curricula: `greso`, `cures` and `speed_bayes`, registered by name.

Legend: N responses per trained group, N_init screening responses (`--speed.n_init`),
P prompts, p a prompt's pass rate, (low, high) the pass-rate band, c / w a prompt's
(decayed) counts of correct / wrong responses in `PromptHistory`, k a zero-variance streak.

- greso (GRESO, arXiv 2506.02177): before any rollout, skips a prompt whose last k visits
  were all correct or all wrong with probability 1 - max(p^k, floor), p adapted after each
  batch; a prompt it rolls out gets all N, filtered on the band like `dapo`.
- cures (CurES, arXiv 2510.01037): orders each epoch by a Beta(1 + c, 1 + w) posterior's
  sqrt(p (1 - p)) and sizes the first request from it, m = clip(round(2N sqrt(p (1 - p))),
  N_init, N); a screened prompt continues as in `speed`.
- speed_bayes (ours): SPEED's screening, skipped, or replaced by all N at once, when the
  decayed Beta(0.5 + c, 0.5 + w) posterior's predictive is confident the screening would
  fall outside (inside) the band; `explore_floor` re-screens skipped prompts at random.

Rules not to break: every trained group has exactly N responses (OpenRLHF's group
baselines); a skipped prompt is counted, never lost (it comes back next epoch); random
choices are keyed draws of (seed, prompt, epoch) (`decision_uniform`) or a generator seeded
by (seed, epoch), so a restored run replays them exactly; `PromptHistory` is bounded and
checkpointed by the scheduler. Each rule in full, with its departures from its paper:
docs/design.md#history-based-curricula.
"""

from __future__ import annotations

import math

import numpy as np

from .config import FLAGS, SpeedConfig
from .history import PromptHistory, decision_uniform
from .posterior import betabinom_pmf
from .records import PHASE_CONTINUE, PHASE_FULL, PHASE_SCREEN
from .strategies import (ACCEPT, REJECT, REQUEST, SKIP, Decision, SpeedStrategy, Strategy,
                         band_reasons, pass_rate, qualify, register_strategy)

# Salts of the keyed draws, so two strategies (or two uses) never share a draw.
_SALT_GRESO = 1
_SALT_CURES = 2
_SALT_BAYES = 3


def _first_request_decision(cfg: SpeedConfig, rewards: np.ndarray, phase: str) -> Decision:
    """After a request of a visit whose first request was a screening or the full group:
    a continuation completes the group; otherwise the band decides (SPEED on a screening,
    DAPO's filter on a full group)."""
    if phase == PHASE_CONTINUE:
        return Decision(ACCEPT, "group_complete")
    stage = "group" if phase == PHASE_FULL else "screen"
    ok, reason = qualify(pass_rate(rewards, cfg.correct_threshold), cfg.pass_rate_low, cfg.pass_rate_high, stage)
    if not ok:
        return Decision(REJECT, reason)
    if phase == PHASE_FULL:
        return Decision(ACCEPT, reason)
    return Decision(REQUEST, reason, cfg.n_samples_per_prompt - len(rewards), PHASE_CONTINUE)


@register_strategy("greso")
class GresoStrategy(Strategy):
    """Pre-rollout skipping of prompts with zero-variance streaks (see the module docstring)."""

    name = "greso"
    reasons = ("greso_skip_easy", "greso_skip_hard") + band_reasons("group")
    P_MIN, P_MAX = 0.05, 0.95  # the reference's min_p / max_p
    FLOOR = 0.01  # the reference's least keep probability

    def __init__(self, config: SpeedConfig) -> None:
        super().__init__(config)
        self.floor = self.FLOOR if config.explore_floor is None else config.explore_floor
        self.p_easy = self.p_hard = config.greso_p_init
        self.rolled = [0, 0, 0]  # groups rolled out since the last batch: all correct, all wrong, all

    @classmethod
    def check_config(cls, config: SpeedConfig) -> list[str]:
        if config.explore_floor == 0.0:
            return [f"{FLAGS['explore_floor']} must be > 0 with --speed.strategy greso: p^k vanishes "
                    "on a long zero-variance streak, and the floor is what brings such a prompt back"]
        return []

    def keep_probability(self, streak: int) -> float:
        if streak == 0:
            return 1.0
        p = self.p_easy if streak > 0 else self.p_hard
        return max(p ** abs(streak), self.floor)

    def start(self, prompt_index: int, history: PromptHistory) -> Decision:
        k = int(history.streak[prompt_index])
        keep = self.keep_probability(k)
        if keep < 1.0 and decision_uniform(self.config.seed, _SALT_GRESO, prompt_index, history.epoch) >= keep:
            return Decision(SKIP, "greso_skip_easy" if k > 0 else "greso_skip_hard")
        return super().start(prompt_index, history)

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        cfg = self.config
        rate = pass_rate(rewards, cfg.correct_threshold)
        self.rolled[0] += rate == 1.0
        self.rolled[1] += rate == 0.0
        self.rolled[2] += 1
        ok, reason = qualify(rate, cfg.pass_rate_low, cfg.pass_rate_high, "group")
        return Decision(ACCEPT if ok else REJECT, reason)

    def on_batch(self, epoch: int) -> None:
        # Epoch 0 has no history to skip on, so its zero-variance share says nothing about
        # p; the reference adapts from epoch 1 on too.
        easy, hard, total = self.rolled
        if epoch > 0 and total:
            target = self.config.greso_target_zero_variance
            self.p_easy = self._step(self.p_easy, skip_more=easy / total >= target / 3)
            self.p_hard = self._step(self.p_hard, skip_more=hard / total >= target * 2 / 3)
        self.rolled = [0, 0, 0]

    def _step(self, p: float, skip_more: bool) -> float:
        step = self.config.greso_p_step
        return max(p - step, self.P_MIN) if skip_more else min(p + step, self.P_MAX)

    def metrics(self) -> dict:
        return {"greso_p_easy": self.p_easy, "greso_p_hard": self.p_hard}

    def state_dict(self) -> dict:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard, "rolled": list(self.rolled)}

    def load_state_dict(self, d: dict) -> None:
        self.p_easy, self.p_hard, self.rolled = d["p_easy"], d["p_hard"], list(d["rolled"])


@register_strategy("cures")
class CuresStrategy(Strategy):
    """Posterior-weighted epoch order and posterior-sized first requests (see the module docstring)."""

    name = "cures"
    uses_n_init = True
    reasons = band_reasons("screen") + band_reasons("group") + ("group_complete",)
    PRIOR = 1.0  # Beta(1 + c, 1 + w), as the reference's counters

    @classmethod
    def check_config(cls, config: SpeedConfig) -> list[str]:
        n, n_init = config.n_samples_per_prompt, config.n_init
        if 2 <= n_init <= n:
            return []
        return [f"{FLAGS['n_init']} ({n_init}) must be in [2, {FLAGS['n_samples_per_prompt']} ({n})] "
                "with --speed.strategy cures: it is the smallest first request of a prompt"]

    @classmethod
    def screen_n(cls, config: SpeedConfig) -> int:
        return config.n_init

    @classmethod
    def history_decay(cls, config: SpeedConfig) -> float:
        return 1.0 if config.posterior_decay is None else config.posterior_decay

    def posterior_mean(self, correct, wrong):
        return (self.PRIOR + correct) / (2 * self.PRIOR + correct + wrong)

    def first_request_size(self, p_hat: float) -> int:
        """m = clip(round(N * sqrt(p(1-p)) / 0.5), N_init, N): the allocation in [N_init, N]."""
        n = self.config.n_samples_per_prompt
        m = math.floor(n * 2.0 * math.sqrt(p_hat * (1.0 - p_hat)) + 0.5)
        return min(max(m, self.config.n_init), n)

    def order_epoch(self, epoch: int, order: np.ndarray, history: PromptHistory) -> np.ndarray:
        correct, wrong = history.counts_all(epoch)  # [P] each
        p_hat = self.posterior_mean(correct, wrong)
        logits = np.sqrt(p_hat * (1.0 - p_hat)) / self.config.cures_temperature  # [P]
        # Gumbel top-k: sorting logits + Gumbel noise draws all P without replacement with
        # probabilities proportional to exp(logits), in one vectorized pass.
        gumbel = np.random.default_rng([self.config.seed, _SALT_CURES, epoch]).gumbel(size=len(logits))
        keys = (logits + gumbel)[order]  # [P] in the base order, which breaks exact ties
        return order[np.argsort(-keys, kind="stable")]

    def start(self, prompt_index: int, history: PromptHistory) -> Decision:
        cfg = self.config
        m = cfg.n_init
        if history.seen(prompt_index):
            m = self.first_request_size(self.posterior_mean(*history.counts(prompt_index)))
        if m >= cfg.n_samples_per_prompt:
            return Decision(REQUEST, "start_full", cfg.n_samples_per_prompt, PHASE_FULL)
        return Decision(REQUEST, "start_screen", m, PHASE_SCREEN)

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        return _first_request_decision(self.config, rewards, history.phase)


@register_strategy("speed_bayes")
class SpeedBayesStrategy(Strategy):
    """SPEED screening, skipped or bypassed by a decaying posterior (see the module docstring)."""

    name = "speed_bayes"
    uses_n_init = True
    reasons = (SpeedStrategy.reasons + band_reasons("group")
               + ("bayes_skip_low", "bayes_skip_high", "bayes_admit", "bayes_explore"))
    PRIOR = 0.5  # Jeffreys: a weak prior, so a few all-wrong screenings make a confident posterior
    FLOOR = 0.05
    DECAY = 0.9

    def __init__(self, config: SpeedConfig) -> None:
        super().__init__(config)
        self.floor = self.FLOOR if config.explore_floor is None else config.explore_floor

    @classmethod
    def check_config(cls, config: SpeedConfig) -> list[str]:
        errors = SpeedStrategy.check_config(config)
        if config.explore_floor == 0.0 and cls.history_decay(config) == 1.0:
            errors.append(f"{FLAGS['explore_floor']} 0 with {FLAGS['posterior_decay']} 1 would skip a "
                          "confidently failed prompt forever: raise one of them")
        return errors

    @classmethod
    def screen_n(cls, config: SpeedConfig) -> int:
        return config.n_init

    @classmethod
    def history_decay(cls, config: SpeedConfig) -> float:
        return cls.DECAY if config.posterior_decay is None else config.posterior_decay

    def band_mass(self, n: int, a: float, b: float) -> tuple[float, float, float]:
        """Predictive probabilities that k of n correct lands at/below low, inside, at/above high."""
        cfg = self.config
        pmf = betabinom_pmf(n, a, b)  # [n + 1]
        rate = np.arange(n + 1) / n
        below = float(pmf[rate <= cfg.pass_rate_low].sum())
        above = float(pmf[rate >= cfg.pass_rate_high].sum())
        return below, 1.0 - below - above, above

    def start(self, prompt_index: int, history: PromptHistory) -> Decision:
        cfg = self.config
        screen = Decision(REQUEST, "start_screen", cfg.n_init, PHASE_SCREEN)
        if not history.seen(prompt_index):
            return screen
        c, w = history.counts(prompt_index)
        a, b = self.PRIOR + c, self.PRIOR + w
        below, _, above = self.band_mass(cfg.n_init, a, b)
        if below + above >= cfg.bayes_skip_confidence:
            if decision_uniform(cfg.seed, _SALT_BAYES, prompt_index, history.epoch) < self.floor:
                return Decision(REQUEST, "bayes_explore", cfg.n_init, PHASE_SCREEN)
            return Decision(SKIP, "bayes_skip_low" if below >= above else "bayes_skip_high")
        _, inside, _ = self.band_mass(cfg.n_samples_per_prompt, a, b)
        if inside >= cfg.bayes_admit_confidence:
            return Decision(REQUEST, "bayes_admit", cfg.n_samples_per_prompt, PHASE_FULL)
        return screen

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        return _first_request_decision(self.config, rewards, history.phase)
