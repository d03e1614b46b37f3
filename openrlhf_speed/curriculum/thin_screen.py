"""`speed_thin`: speed_seq that screens fewer of the prompts whose tag makes a qualification dear.

Legend as in seq_screen.py (N, N_init, first half m, pass rate p, tag t), and: lambda, the run's
screening responses per qualified prompt (speed_seq's measured cost of a qualification); s_t and
q_t, the screening responses and qualifications that one screening of a prompt of tag t is
expected to give; c_t = s_t / q_t.

Where speed_seq's discarded screening goes: it screens every prompt at least m times. In the
regime map's `high` mix (proving/shipped/proving-full-v5/mixes/high/difficulty.md, the start
model at step 0) two levels, mul_2x2 and addsub_3digit, are 66% of the prompts at a pass rate
of 0.02. A first half of 2 is mixed for about 4% of them: one qualification per ~50 screening
responses, against ~4 for the levels inside the band (sum_2digit and mul_2x1, pass ~0.35). So
two thirds of the first halves go to levels that give about a quarter of the qualifications,
and the tag prior speed_seq learns says so before the first response.

Before a prompt's first response (once its tag's prior and the run's cost are learned), s_t and q_t are computed under speed_seq's own rule (the
first half; the rest where the continue test asks for it), in expectation over the prompt's
posterior: its tag's prior times its counts from earlier visits. The prompt is screened with
probability

    pi = 1                          when c_t <= lambda
    pi = max(floor, lambda / c_t)   otherwise

and skipped for this visit otherwise (a keyed draw, `decision_uniform`: replayed exactly on resume).

Why lambda / c_t and not a threshold at lambda. Screening a prompt pays when its qualifications
cost less than the average one, so a threshold is the cheapest rule for one step; but every skip
lowers lambda and pushes the next tag over it, until one tag is all that trains. With
pi = lambda / c_t a dear tag spends on screenings what its qualifications would cost at the
average price (pi * s_t = lambda * q_t): it keeps being trained, in proportion, and its prior
keeps learning. The floor (`--speed.explore_floor`, default 0.1) lets a tag the policy starts
to solve come back even when its prior has not caught up.

Invariants: speed_seq's (every trained group is N responses of one visit, within the staleness
bound). What it changes: a prompt's chance of being trained this visit is speed_seq's times pi,
a function of its tag's (and its own earlier) pass rates, so Theorem 4.1's objective weighs each
tag by pi on top of speed_seq's factor; its optimum (every prompt solved) is unchanged. A
skipped prompt uses up its place in the epoch: a run needs about 1 / pi more epochs of a dear
tag's prompts to see each once.
"""

from __future__ import annotations

import numpy as np

from .config import FLAGS, SpeedConfig
from .history import PromptHistory, decision_uniform
from .seq_screen import (GRID, PRIOR_PROMPTS, START_QUALIFIED, SeqScreenStrategy, _likelihood, chance_mixed,
                         more_pays)
from .strategies import SKIP, Decision, register_strategy

DEFAULT_FLOOR = 0.1
# Thinning waits for evidence. Before it, a tag's prior is Jeffreys' and the run's cost of a
# qualification a guess (2 N_init responses), and on those a first half of one response
# (N_init = 2) predicts no qualification at all: every prompt would be skipped (it emptied a
# 64-prompt epoch in 3 screenings). So a tag is thinned once its prior holds the weight of about
# LEARN_SCREENINGS screenings, and only after the run has qualified LEARN_QUALIFIED prompts.
LEARN_SCREENINGS = 16
LEARN_QUALIFIED = 8
_SALT_THIN = 4  # keyed draws of other strategies use salts 1-3 (history_strategies.py) and 5 (keep_screen.py)


def screening_yield(weights: np.ndarray, n_correct: float, n_wrong: float, m: int, n_init: int,
                    cost: float) -> tuple[float, float]:
    """(s, q): the screening responses and qualifications one screening is expected to give,
    under speed_seq's rule (m first; the other n_init - m where (n_init - m) / c <= `cost`), for a
    prompt whose posterior is `weights` [G] times its counts so far."""
    post = weights * _likelihood(n_correct, n_wrong)
    if post.sum() <= 0:
        return float(m), 0.0
    post = post / post.sum()
    all_wrong, all_right = float((post * (1.0 - GRID) ** m).sum()), float((post * GRID ** m).sum())
    spent, qualified = float(m), max(0.0, 1.0 - all_wrong - all_right)
    rest = n_init - m
    for share, all_correct, counts in ((all_wrong, False, (n_correct, n_wrong + m)),
                                       (all_right, True, (n_correct + m, n_wrong))):
        c = chance_mixed(weights, *counts, rest, all_correct=all_correct)
        if share > 0 and more_pays(c, rest, cost):
            spent += share * rest
            qualified += share * c
    return spent, qualified


@register_strategy("speed_thin")
class ThinScreenStrategy(SeqScreenStrategy):
    """speed_seq, with each prompt screened with probability pi (see the module docstring)."""

    name = "speed_thin"
    reasons = SeqScreenStrategy.reasons + ("thin_skip",)

    def __init__(self, config: SpeedConfig) -> None:
        super().__init__(config)
        self.floor = DEFAULT_FLOOR if config.explore_floor is None else config.explore_floor
        self.thinned = {"screened": 0, "skipped": 0}

    @classmethod
    def check_config(cls, config: SpeedConfig) -> list[str]:
        errors = super().check_config(config)
        if config.explore_floor == 0.0:
            errors.append(f"{FLAGS['explore_floor']} must be > 0 with --speed.strategy {cls.name}: a tag it screens "
                          "less learns only from the prompts it still screens, and the floor is what brings back a "
                          "tag the policy starts to solve")
        if not config.prior_key:
            errors.append(f"--speed.strategy {cls.name} screens less of the tags whose qualifications cost most, "
                          f"which needs tags: add {FLAGS['prior_key']} FIELD (a difficulty level or source of "
                          "the rows), or use --speed.strategy speed_seq")
        return errors

    def screen_probability(self, prompt_index: int, history: PromptHistory) -> float:
        """pi of the prompt's next visit: 1 where its qualifications cost at most the run's average,
        or while the tag's prior or the run's cost is still a guess."""
        tag = self._tag(prompt_index)
        weights = self._weights(tag)
        if weights.sum() < PRIOR_PROMPTS + LEARN_SCREENINGS or self.qualified < START_QUALIFIED + LEARN_QUALIFIED:
            return 1.0
        cost = self.cost_per_qualified()
        correct, wrong = history.counts(prompt_index)
        spent, qualified = self.expected_yield(weights, correct, wrong, cost, tag)
        if spent <= cost * qualified:
            return 1.0
        return max(self.floor, cost * qualified / spent)

    def expected_yield(self, weights: np.ndarray, correct: float, wrong: float, cost: float,
                       tag: int = 0) -> tuple[float, float]:
        """(screening responses, qualifications) one screening of a prompt of `tag` is expected to give."""
        return screening_yield(weights, correct, wrong, self.first, self.config.n_init, cost)

    def start(self, prompt_index: int, history: PromptHistory) -> Decision:
        keep = self.screen_probability(prompt_index, history)
        if keep < 1.0 and decision_uniform(self.config.seed, _SALT_THIN, prompt_index, history.epoch) >= keep:
            self.thinned["skipped"] += 1
            return Decision(SKIP, "thin_skip")
        self.thinned["screened"] += 1
        return super().start(prompt_index, history)

    def metrics(self) -> dict:
        out = super().metrics()
        seen = self.thinned["screened"] + self.thinned["skipped"]
        out["thin_screened_share"] = self.thinned["screened"] / seen if seen else float("nan")
        return out

    def on_batch(self, epoch: int) -> None:
        super().on_batch(epoch)
        self.thinned = {"screened": 0, "skipped": 0}
