"""`speed_keep`: speed_thin that continues an all-equal screening where a full group is likely mixed.

Legend as in seq_screen.py and thin_screen.py (N, N_init, first half m, pass rate p, tag t,
lambda the run's screening responses per qualified prompt), and k the responses a screening
holds when speed_thin would turn it away.

Where SPEED's screen loses on easy data (docs/benchmarks.md, "Cell low at B = 16"): as the
policy learns, more of the prompts it screens come back all right, and SPEED rejects them as
solved. A prompt with p = 0.85 is 4 of 4 right half the time (0.85^4 = 0.52), yet a group of
24 of it is mixed 98% of the time: on the `low` mix SPEED turned away 0.44-0.45 of its
screenings as solved in a run's last quarter where DAPO's groups of 24 found 0.09-0.12 solved.
The same holds at the other end for a prompt with p = 0.05 that screens all wrong.

So where speed_thin rejects an all-equal screening of k responses (after its first half or
after N_init), c is the chance that the other N - k responses make the group mixed. Continuing
costs N - k responses for c informative groups; a fresh qualification costs lambda screening
responses plus its own N - N_init. The screening is continued to N when

    (N - k) / c <= lambda + (N - N_init)

and the finished group is trained only if it is mixed: an all-equal group of N is discarded
(its tokens counted as discarded, as DAPO's are).

c is measured, not only modelled. The tag prior speed_seq learns from screenings cannot give it:
k responses pin down only the first k moments of a tag's pass rates, and c turns on the tail
(a prompt solved 90% of the time against one always solved). So each (tag, all right or all
wrong, k) keeps the counts of its continued groups and of those that came out mixed, forgetting
at KEEP_WINDOW, and c is their mean with the model's c (chance_mixed on the tag prior, which
here also learns from every whole group) as PRIOR_GROUPS pseudo-groups. Where the rule says
no, a screening is still continued with probability EXPLORE (a keyed draw, replayed on resume),
and always while its key has fewer than LEARN_GROUPS groups, so a c that was low when the policy
was weak is measured again as it learns.

A group is kept only while fewer than B x `--speed.max_staleness` groups are complete or
continuing ahead of it (`room`): kept where it cannot train before its screening ages past the
bound, it would be discarded whole.

Invariants: speed_seq's (every trained group is N responses of one visit, drawn within the
staleness bound, and mixed). What it changes: a prompt's chance of being trained is speed_thin's
plus, for the all-equal screenings it keeps, the chance c that its group is mixed, so Theorem
4.1's weighting across pass rates flattens towards DAPO's (a prompt near 0 or 1 is trained more
often than under SPEED); the optimum (every prompt solved) is unchanged. speed_thin's price of a
tag counts each kept outcome as a qualification with its chance c (kept_yield). State: speed_thin's
and the counts, and which prompts in flight were kept, saved with every checkpoint.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .history import PromptHistory, decision_uniform
from .records import PHASE_CONTINUE
from .seq_screen import GRID, _likelihood, chance_mixed, more_pays
from .strategies import ACCEPT, REJECT, REQUEST, Decision, register_strategy
from .thin_screen import ThinScreenStrategy

KEEP_WINDOW = 32  # a key's counts forget at this many continued groups: the policy moves
PRIOR_GROUPS = 2.0  # weight of the model's c, in groups
LEARN_GROUPS = 4.0  # below this many (forgetting) groups a key's screenings are all continued
EXPLORE = 0.02  # otherwise, where the rule says no, this share is continued anyway
_SALT_KEEP = 5  # keyed draws of other strategies use salts 1-4


def keep_pays(c: float, left: int, cost: float, continuation: int) -> bool:
    """Whether continuing an all-equal screening (`left` more responses, a mixed group with chance
    c) costs at most what a fresh qualification does per informative group (`cost` screening
    responses plus its `continuation`)."""
    return more_pays(c, left, cost + continuation)


def kept_yield(weights: np.ndarray, n_correct: float, n_wrong: float, m: int, n_init: int, n: int,
               cost: float, chance: Optional[Callable[[bool, int, float], float]] = None) -> float:
    """The informative groups the keep rule is expected to add to one screening of a prompt whose
    posterior is `weights` [G] times its counts: for each all-equal outcome, at the point where
    speed_seq's rule stops (m, or N_init where it screens the rest), its chance times c where
    keep_pays. chance(all_correct, k, modelled c) -> the c to use (default: the modelled one)."""
    post = weights * _likelihood(n_correct, n_wrong)
    if post.sum() <= 0:
        return 0.0
    post = post / post.sum()
    added = 0.0
    for all_correct in (True, False):
        like = GRID if all_correct else 1.0 - GRID

        def counts(k):
            return (n_correct + k, n_wrong) if all_correct else (n_correct, n_wrong + k)

        share, k = float((post * like ** m).sum()), m
        c_rest = chance_mixed(weights, *counts(m), n_init - m, all_correct=all_correct)
        if more_pays(c_rest, n_init - m, cost):  # speed_seq screens the rest first
            share, k = float((post * like ** n_init).sum()), n_init
        c = chance_mixed(weights, *counts(k), n - k, all_correct=all_correct)
        c = chance(all_correct, k, c) if chance else c
        if share > 0 and keep_pays(c, n - k, cost, n - n_init):
            added += share * c
    return added


@register_strategy("speed_keep")
class KeepScreenStrategy(ThinScreenStrategy):
    """speed_thin, with all-equal screenings continued to N where a mixed group is likely (see the
    module docstring)."""

    name = "speed_keep"
    reasons = ThinScreenStrategy.reasons + ("keep_all_correct", "keep_all_wrong", "keep_explore", "keep_unmixed")

    def __init__(self, config) -> None:
        super().__init__(config)
        self.kept = {"kept": 0, "explored": 0, "unmixed": 0}
        self.keep_counts: dict[tuple, list] = {}  # (tag, all correct, k) -> [groups, mixed] (forgetting)
        self.in_flight: dict[int, tuple] = {}  # prompt -> its key, while its kept group is generated
        self._screening = None  # (prompt, rewards) of the screening speed_thin just learned from

    # ---- c: modelled, then measured ------------------------------------------------------

    def measured_chance(self, key: tuple, modelled: float) -> float:
        groups, mixed = self.keep_counts.get(key, (0.0, 0.0))
        return (mixed + PRIOR_GROUPS * modelled) / (groups + PRIOR_GROUPS)

    def _count(self, key: tuple, mixed: bool) -> None:
        counts = self.keep_counts.setdefault(key, [0.0, 0.0])
        counts[0] = counts[0] * (1.0 - 1.0 / KEEP_WINDOW) + 1.0
        counts[1] = counts[1] * (1.0 - 1.0 / KEEP_WINDOW) + float(mixed)

    # ---- learning the tag prior from whole groups -------------------------------------------

    def _learn(self, i: int, rewards: np.ndarray) -> None:
        """A screening's cost counts now; what it teaches its tag's prior waits for the decision:
        a prompt that goes on to N teaches it with all N responses (see after_scored)."""
        self.spent += len(rewards)
        self._screening = (i, rewards)

    # ---- decisions ---------------------------------------------------------------------------

    def after_scored(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> Decision:
        cfg, k, n = self.config, len(rewards), self.config.n_samples_per_prompt
        right = rewards >= cfg.correct_threshold
        equal = bool(right.all() or not right.any())
        if k == n:
            # The group's N responses teach the tag prior what k screening responses cannot (its
            # tail); which prompts go on depends only on their screenings, which the prior has
            # seen, so learning from the whole group adds no selection bias.
            self._update_prior(prompt_index, rewards)
            key = self.in_flight.pop(prompt_index, None)
            if key is not None:
                self._count(key, not equal)
            if equal:  # only a kept screening ends all equal: a qualified one was mixed already
                self.kept["unmixed"] += 1
                return Decision(REJECT, "keep_unmixed")
            return Decision(ACCEPT, "group_complete")
        # A new screening of a prompt whose kept group never completed (it went stale and is
        # screened again): that group is no outcome of its key.
        self.in_flight.pop(prompt_index, None)
        key = (self._tag(prompt_index), bool(right.all()), k)
        # the model's c before this screening is learned: the prompt's own counts already hold it
        c = self.measured_chance(key, self.keep_chance(prompt_index, rewards, history)) if equal else 0.0
        self._screening = None
        decision = super().after_scored(prompt_index, rewards, history)
        screening, self._screening = self._screening, None
        if decision.verdict == REJECT and equal and self.room(history):
            reason = None
            if keep_pays(c, n - k, self.cost_per_qualified(), n - cfg.n_init):
                reason = "keep_all_correct" if key[1] else "keep_all_wrong"
            elif (self.keep_counts.get(key, (0.0,))[0] < LEARN_GROUPS
                  or decision_uniform(cfg.seed, _SALT_KEEP, prompt_index, history.epoch) < EXPLORE):
                reason = "keep_explore"
            if reason:
                self.kept["explored" if reason == "keep_explore" else "kept"] += 1
                self.in_flight[prompt_index] = key
                return Decision(REQUEST, reason, n - k, PHASE_CONTINUE)
        if screening is not None and not (decision.verdict == REQUEST and decision.phase == PHASE_CONTINUE):
            self._update_prior(*screening)
        return decision

    def room(self, history: PromptHistory) -> bool:
        """Whether a group kept now trains before its screening goes stale: fewer groups coming
        than B x the staleness bound. With many screenings in flight (the paper's generation
        batch is 4 B) and nearly all of them kept, the groups outrun training and a stale one is
        discarded whole (the first run on the `low` mix lost 26 groups in one step that way)."""
        bound = self.config.max_staleness
        return bound is None or history.groups_coming < self.config.batch_prompts * max(1, bound)

    def keep_chance(self, prompt_index: int, rewards: np.ndarray, history: PromptHistory) -> float:
        """The model's c: the chance, under the prompt's posterior, that the other N - k responses
        make an all-equal screening's group mixed."""
        correct, wrong = history.counts(prompt_index)
        return chance_mixed(self._weights(self._tag(prompt_index)), correct, wrong,
                            self.config.n_samples_per_prompt - len(rewards),
                            all_correct=bool(rewards[0] >= self.config.correct_threshold))

    def expected_yield(self, weights: np.ndarray, correct: float, wrong: float, cost: float,
                       tag: int = 0) -> tuple[float, float]:
        spent, qualified = super().expected_yield(weights, correct, wrong, cost, tag)
        cfg = self.config
        return spent, qualified + kept_yield(
            weights, correct, wrong, self.first, cfg.n_init, cfg.n_samples_per_prompt, cost,
            chance=lambda all_correct, k, c: self.measured_chance((tag, all_correct, k), c))

    # ---- reporting and checkpoints ---------------------------------------------------------------

    def metrics(self) -> dict:
        out = super().metrics()
        out.update({f"keep_{name}": float(v) for name, v in self.kept.items()})
        return out

    def on_batch(self, epoch: int) -> None:
        super().on_batch(epoch)
        self.kept = {"kept": 0, "explored": 0, "unmixed": 0}

    def state_dict(self) -> dict:
        return {**super().state_dict(),
                "keep_counts": [[list(key), counts] for key, counts in self.keep_counts.items()],
                "keep_in_flight": [[i, list(key)] for i, key in self.in_flight.items()]}

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)
        self.keep_counts = {(int(t), bool(a), int(k)): [float(x) for x in counts]
                            for (t, a, k), counts in d.get("keep_counts", [])}
        self.in_flight = {int(i): (int(t), bool(a), int(k)) for i, (t, a, k) in d.get("keep_in_flight", [])}
