"""Curriculum strategies behind one registry, and the pure decisions they are made of.

A strategy is a class constructed as `cls(config)` whose two decision methods read their
arguments (config, prompt index, rewards so far, `PromptHistory`) and return a `Decision`
(verdict plus reason; reasons become counters in the batch metrics):

    start(prompt_index, history)          -> request the first responses, or skip the prompt
    after_scored(prompt_index, rewards, history)
                                          -> request more, accept the group, or reject it

`history.epoch` / `history.phase` give the visit's epoch and the phase just scored.
Optional hooks, all with do-nothing defaults:

    order_epoch(epoch, order, history)    -> the order epoch `epoch` starts prompts in
                                             (a permutation: every prompt stays reachable)
    on_batch(epoch)                       called when a training batch is handed out
    metrics()                             extra `speed/<key>` floats for every batch
    state_dict() / load_state_dict(d)     the strategy's own small state (plain python)

Per-prompt history (posteriors, zero-variance streaks) lives in `PromptHistory`, which the
scheduler feeds with every scored request and checkpoints; a strategy keeps only O(1) state
of its own (GRESO's adaptive probabilities), which the scheduler checkpoints through
`state_dict`. Together that lets `Scheduler.state_dict` capture a run completely.

Registered here:
- `speed`   (default) screen N_init, qualify on the screening pass rate, continue with
            N - N_init (SPEED, arXiv 2506.09016, Alg. 1);
- `dapo`    request all N, keep groups whose pass rate is inside the band (DAPO dynamic
            sampling: the baseline that filters after full inference);
- `uniform` request all N, keep every group (plain RLOO/GRPO).
History-based ones (`greso`, `cures`, `speed_bayes`) are in `history_strategies.py`; the
two-stage screening `speed_seq` in `seq_screen.py`, and `speed_thin`, which also screens
fewer of the tags whose qualifications cost most, in `thin_screen.py`.

Departure from the paper: its band (0, 1) is hard-coded; here it is (pass_rate_low,
pass_rate_high), and `dapo` uses the same band on the full group.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from .config import FLAGS, STRATEGIES, SpeedConfig
from .history import PromptHistory
from .records import PHASE_CONTINUE, PHASE_FULL, PHASE_SCREEN

REQUEST = "request"
ACCEPT = "accept"
REJECT = "reject"
SKIP = "skip"


@dataclasses.dataclass(frozen=True)
class Decision:
    """verdict: REQUEST (n more responses in `phase`), ACCEPT, REJECT or SKIP."""

    verdict: str
    reason: str
    n: int = 0
    phase: Optional[str] = None


def pass_rate(rewards: np.ndarray, correct_threshold: float) -> float:
    """Fraction of responses whose reward is >= correct_threshold. rewards: [n]."""
    return float(np.mean(np.asarray(rewards) >= correct_threshold))


def qualify(rate: float, low: float, high: float, stage: str) -> tuple[bool, str]:
    """Keep a prompt when low < rate < high. The reason names the stage ("screen",
    "group") and separates all-wrong/all-correct from merely out-of-band prompts."""
    if rate <= low:
        return False, f"{stage}_all_wrong" if rate == 0.0 else f"{stage}_too_hard"
    if rate >= high:
        return False, f"{stage}_all_correct" if rate == 1.0 else f"{stage}_too_easy"
    return True, f"{stage}_qualified"


def band_reasons(stage: str) -> tuple[str, ...]:
    """The reason keys of a pass-rate band check at `stage` (screen or group), as qualify names them."""
    return tuple(f"{stage}_{r}" for r in ("all_wrong", "too_hard", "qualified", "too_easy", "all_correct"))


class Strategy:
    """Base class of the registry's one signature. Subclasses override what they need.

    screen_n(config): size of the first request, used for the screening histogram keys
        (first requests of other sizes are binned onto its grid).
    reasons: the reasons the strategy can return, so metric keys are stable (zero-filled).
        A `start` reason is counted when the prompt is skipped, or when it is listed here
        (e.g. `bayes_admit`); the plain `start_screen`/`start_full` are not listed.
    history_decay(config): per-epoch decay of the history's counts (1.0: none).
    """

    name = "base"
    reasons: tuple[str, ...] = ()
    uses_n_init = False  # True when --speed.n_init sizes (some of) the first requests
    reads_tags = False  # True when --speed.seq_first and --speed.prior_key are its flags
    qualifies = True  # False when no band is tested (uniform): no qualification figures

    def __init__(self, config: SpeedConfig) -> None:
        self.config = config

    @classmethod
    def check_config(cls, config: SpeedConfig) -> list[str]:
        return []

    @classmethod
    def screen_n(cls, config: SpeedConfig) -> int:
        return config.n_samples_per_prompt

    @classmethod
    def history_decay(cls, config: SpeedConfig) -> float:
        return 1.0

    def start(self, prompt_index: int, history: PromptHistory) -> Decision:
        return Decision(REQUEST, "start_full", self.config.n_samples_per_prompt, PHASE_FULL)

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        raise NotImplementedError

    def bind_tags(self, tags) -> None:
        """Each prompt's tag index [P] from the dataset (`--speed.prior_key`), or None; only
        strategies with a per-tag prior read it."""

    def order_epoch(self, epoch: int, order: np.ndarray, history: PromptHistory) -> np.ndarray:
        """The order epoch `epoch` starts prompts in. order: the scheduler's seeded
        permutation [P]; a strategy may return another permutation of it."""
        return order

    def on_batch(self, epoch: int) -> None:
        """A training batch was handed out; `epoch` is the epoch prompts are starting from."""

    def metrics(self) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, d: dict) -> None:
        pass


def register_strategy(name: str, cls: Optional[type] = None) -> Callable:
    """Register a Strategy subclass under `name` in `STRATEGIES` (held by config.py, which
    validates against it); usable as `@register_strategy("x")`."""

    def _register(c: type) -> type:
        STRATEGIES[name] = c
        return c

    return _register if cls is None else _register(cls)


@register_strategy("speed")
class SpeedStrategy(Strategy):
    """Screen N_init, continue qualified prompts with N - N_init (SPEED)."""

    name = "speed"
    reasons = band_reasons("screen") + ("group_complete",)
    uses_n_init = True

    @classmethod
    def check_config(cls, config: SpeedConfig) -> list[str]:
        n, n_init = config.n_samples_per_prompt, config.n_init
        errors = []
        if n_init < 2:
            errors.append(
                f"{FLAGS['n_init']} ({n_init}) must be >= 2: one screening response has pass "
                "rate 0 or 1 and never qualifies"
            )
        if n_init >= n:
            errors.append(
                f"{FLAGS['n_init']} ({n_init}) must be < {FLAGS['n_samples_per_prompt']} ({n}): "
                "qualified prompts need continuation responses"
            )
        return errors

    @classmethod
    def screen_n(cls, config: SpeedConfig) -> int:
        return config.n_init

    def start(self, prompt_index: int, history: PromptHistory) -> Decision:
        return Decision(REQUEST, "start_screen", self.config.n_init, PHASE_SCREEN)

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        cfg = self.config
        if len(rewards) == cfg.n_samples_per_prompt:
            return Decision(ACCEPT, "group_complete")
        rate = pass_rate(rewards, cfg.correct_threshold)  # screening responses only here
        ok, reason = qualify(rate, cfg.pass_rate_low, cfg.pass_rate_high, "screen")
        if not ok:
            return Decision(REJECT, reason)
        return Decision(REQUEST, reason, cfg.n_samples_per_prompt - cfg.n_init, PHASE_CONTINUE)


@register_strategy("dapo")
class DapoStrategy(Strategy):
    """Generate all N, then keep groups whose pass rate is inside the band (DAPO)."""

    name = "dapo"
    reasons = band_reasons("group")

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        cfg = self.config
        rate = pass_rate(rewards, cfg.correct_threshold)
        ok, reason = qualify(rate, cfg.pass_rate_low, cfg.pass_rate_high, "group")
        return Decision(ACCEPT if ok else REJECT, reason)


@register_strategy("uniform")
class UniformStrategy(Strategy):
    """Generate all N and keep every group: no curriculum."""

    name = "uniform"
    reasons = ("uniform_kept",)
    qualifies = False

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        return Decision(ACCEPT, "uniform_kept")
