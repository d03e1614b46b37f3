"""`speed_seq`: SPEED's screening done in two halves, the second only where it can still pay.

Legend: N responses per trained group, N_init screening responses (`--speed.n_init`), m the
first half (`--speed.seq_first`, default N_init // 2), p a prompt's pass rate, t its tag
(`--speed.prior_key`, e.g. a dataset's difficulty level; one tag for all without it).

Where SPEED's cost above the ceiling goes: the screenings of prompts that do not qualify
(docs/benchmarks.md, "The regime map"). Most of them are all wrong (or all right) from the
first response on, and the prompt's tag often says so before any response. So:

1. Screen m responses. Mixed: the prompt qualifies (under the (0, 1) band any N_init that
   holds them is mixed too) and continues with N - m.
2. All equal: the chance c that the other N_init - m make the screening mixed is read off the
   prompt's posterior: its tag's prior (a grid of pass rates whose weights are learned online
   from every finished screening of that tag, over about TAG_WINDOW recent prompts) times its
   own counts (PromptHistory: this visit's responses and, with decay, earlier visits').
   Screen the rest when (N_init - m) / c, the responses it costs per qualification found this
   way, is at most what a qualification costs on average (the run's screening responses over
   its qualified prompts, measured online); reject otherwise.
3. After N_init: SPEED's band decision.

Invariants: every trained group is N responses of one visit, drawn within the staleness bound
as in `speed`; every prompt of an epoch is screened (at least m responses), none skipped.
What it changes (docs/design.md, "speed_seq"): a prompt's chance of being trained is still a
function of its pass rate, times a factor that depends on its tag through the continue test,
so Theorem 4.1's objective becomes a sum over tags of monotone transforms of p: the optimum
(every prompt solved) is unchanged, the weighting across tags is not. Needs the (0, 1) band.
"""

from __future__ import annotations

import numpy as np

from .config import FLAGS, SpeedConfig
from .history import PromptHistory
from .records import PHASE_CONTINUE, PHASE_SCREEN
from .strategies import (ACCEPT, REJECT, REQUEST, Decision, SpeedStrategy, band_reasons, pass_rate, qualify,
                         register_strategy)

GRID = np.linspace(0.0, 1.0, 21)  # pass rates the tag priors put weight on
# A tag's prior forgets at this many finished screenings: the policy moves, so a level's pass
# rates from 10 steps ago matter more than from 100 (about 4-16 steps of B = 16 at q = 0.3).
TAG_WINDOW = 256
PRIOR_PROMPTS = 2.0  # weight of the starting prior, in prompts: gone after a few screenings
# Before any qualification is measured, a qualification is taken to cost N_init / 0.5 responses.
START_QUALIFIED, START_SPENT_PER_N_INIT = 1.0, 2.0


def _jeffreys_grid() -> np.ndarray:
    """Beta(0.5, 0.5) mass on GRID (ends clipped inward so they stay finite)."""
    x = np.clip(GRID, 0.01, 0.99)
    w = 1.0 / np.sqrt(x * (1.0 - x))
    return w / w.sum()


def _likelihood(n_correct: float, n_wrong: float) -> np.ndarray:
    """p^c (1 - p)^w on GRID, scaled to a max of 1. [G]"""
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 x log 0 counts as 0: p = 0 fits no correct
        log = (np.where(n_correct > 0, n_correct * np.log(GRID), 0.0)
               + np.where(n_wrong > 0, n_wrong * np.log1p(-GRID), 0.0))
    return np.exp(log - log.max())


def chance_mixed(weights: np.ndarray, n_correct: float, n_wrong: float, remaining: int, all_correct: bool) -> float:
    """P(the next `remaining` responses are not all like the ones so far | prior weights on
    GRID, counts so far): the chance a screening all correct (all wrong) so far ends mixed."""
    post = weights * _likelihood(n_correct, n_wrong)
    if post.sum() <= 0:
        return 0.0
    post = post / post.sum()
    same = GRID ** remaining if all_correct else (1.0 - GRID) ** remaining
    return float((post * (1.0 - same)).sum())


def more_pays(c: float, more: int, cost: float) -> bool:
    """The continue test: `more` responses that find a qualification with chance c cost at most
    `cost` responses per qualification found."""
    return c > 0 and more / c <= cost


@register_strategy("speed_seq")
class SeqScreenStrategy(SpeedStrategy):
    """Two-stage screening with a tag prior and a cost rule (see the module docstring)."""

    name = "speed_seq"
    reads_tags = True  # and its subclasses'
    reasons = band_reasons("screen") + ("seq_more", "seq_stop_all_wrong", "seq_stop_all_correct",
                                         "group_complete")

    def __init__(self, config: SpeedConfig) -> None:
        super().__init__(config)
        self.first = first_request(config)
        self.tags = None  # [P] tag index of each prompt (bind_tags); None: one tag
        self.tag_weights: dict[int, np.ndarray] = {}  # tag -> [G] learned weights (prompts)
        self.spent = START_SPENT_PER_N_INIT * config.n_init  # screening responses
        self.qualified = START_QUALIFIED
        self.window = {"more": 0, "stopped": 0}

    @classmethod
    def check_config(cls, config: SpeedConfig) -> list[str]:
        errors = super().check_config(config)
        if (config.pass_rate_low, config.pass_rate_high) != (0.0, 1.0):
            errors.append(f"--speed.strategy {cls.name} stops a screening early only where its verdict is already "
                          f"certain, which needs the band (0, 1); {FLAGS['pass_rate_low']} "
                          f"{config.pass_rate_low:g} / {FLAGS['pass_rate_high']} {config.pass_rate_high:g} would "
                          "qualify on a part of the screening: use --speed.strategy speed with a band")
        m = first_request(config)
        if not 1 <= m < config.n_init:
            errors.append(f"{FLAGS['seq_first']} ({m}) must be in [1, {FLAGS['n_init']} - 1 = {config.n_init - 1}]: "
                          "the first half of the screening")
        return errors

    @classmethod
    def screen_n(cls, config: SpeedConfig) -> int:
        return first_request(config)

    def bind_tags(self, tags) -> None:
        """Each prompt's tag index [P] (ints); the scheduler passes the driver's tags."""
        self.tags = None if tags is None else np.asarray(tags, dtype=np.int64)

    def _tag(self, i: int) -> int:
        return 0 if self.tags is None else int(self.tags[i])

    def _weights(self, tag: int) -> np.ndarray:
        if tag not in self.tag_weights:
            self.tag_weights[tag] = PRIOR_PROMPTS * _jeffreys_grid()
        return self.tag_weights[tag]

    def _learn(self, i: int, rewards: np.ndarray) -> None:
        """A finished screening: its cost counts, and it updates its tag's weights."""
        self._update_prior(i, rewards)
        self.spent += len(rewards)

    def _update_prior(self, i: int, rewards: np.ndarray) -> None:
        """One online EM step of prompt i's tag weights on these rewards, forgetting."""
        s = int(np.sum(rewards >= self.config.correct_threshold))
        w = self._weights(self._tag(i))
        r = w * _likelihood(s, len(rewards) - s)
        if r.sum() > 0:
            w *= 1.0 - 1.0 / TAG_WINDOW
            w += r / r.sum()

    def cost_per_qualified(self) -> float:
        return self.spent / self.qualified

    def start(self, prompt_index: int, history: PromptHistory) -> Decision:
        return Decision(REQUEST, "start_screen", self.first, PHASE_SCREEN)

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        cfg, k = self.config, len(rewards)
        if k == cfg.n_samples_per_prompt:
            return Decision(ACCEPT, "group_complete")
        if history.phase == PHASE_CONTINUE:
            raise RuntimeError(f"speed_seq: a continuation of {k} responses is not a whole group")
        ok, reason = qualify(pass_rate(rewards, cfg.correct_threshold), cfg.pass_rate_low, cfg.pass_rate_high,
                             "screen")
        if ok:
            self._learn(prompt_index, rewards)
            self.qualified += 1
            return Decision(REQUEST, reason, cfg.n_samples_per_prompt - k, PHASE_CONTINUE)
        if k < cfg.n_init:
            remaining = cfg.n_init - k
            correct, wrong = history.counts(prompt_index)
            c = chance_mixed(self._weights(self._tag(prompt_index)), correct, wrong, remaining,
                             all_correct=bool(rewards[0] >= cfg.correct_threshold))
            if more_pays(c, remaining, self.cost_per_qualified()):
                self.window["more"] += 1
                return Decision(REQUEST, "seq_more", remaining, PHASE_SCREEN)
            reason = "seq_stop_all_correct" if rewards[0] >= cfg.correct_threshold else "seq_stop_all_wrong"
            self.window["stopped"] += 1
        self._learn(prompt_index, rewards)
        return Decision(REJECT, reason)

    def metrics(self) -> dict:
        out = {"seq_cost_per_qualified": self.cost_per_qualified(), "seq_tags": float(len(self.tag_weights))}
        seen = self.window["more"] + self.window["stopped"]
        out["seq_more_share"] = self.window["more"] / seen if seen else float("nan")
        return out

    def on_batch(self, epoch: int) -> None:
        self.window = {"more": 0, "stopped": 0}

    def state_dict(self) -> dict:
        return {"tag_weights": {int(t): w.tolist() for t, w in self.tag_weights.items()}, "spent": self.spent,
                "qualified": self.qualified}

    def load_state_dict(self, d: dict) -> None:
        self.tag_weights = {int(t): np.asarray(w, dtype=np.float64) for t, w in d.get("tag_weights", {}).items()}
        self.spent = float(d.get("spent", self.spent))
        self.qualified = float(d.get("qualified", self.qualified))


def first_request(config: SpeedConfig) -> int:
    return config.seq_first if config.seq_first is not None else max(1, config.n_init // 2)
