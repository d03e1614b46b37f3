"""Records exchanged between the scheduler and its driver, and a prompt's lifecycle record.

Legend for array shapes in this package:
    N  responses per trained group (`n_samples_per_prompt`)
    B  groups per training batch (`batch_prompts`)
    [B, N]  one row per group, screening responses first, continuation after

A prompt's lifecycle inside one epoch is one `PromptState`, not parallel lists:

    screening --qualified--> continuing --complete--> ready --pop_batch--> trained
        |                                               ^
        +--rejected (dropped, counted)       full ------+   (dapo/uniform: one request of N)

Every `Response` carries the policy version that generated it, so staleness is measurable.
Nothing here departs from the paper; the paper has no explicit record types.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

PHASE_SCREEN = "screen"
PHASE_CONTINUE = "continue"
PHASE_FULL = "full"
PHASES = (PHASE_SCREEN, PHASE_CONTINUE, PHASE_FULL)

STATUS_SCREENING = "screening"
STATUS_CONTINUING = "continuing"
STATUS_FULL = "full"
STATUS_READY = "ready"
STATUS_REJECTED = "rejected"
# The status a prompt has while its request of a given phase is outstanding.
STATUS_OF_PHASE = {
    PHASE_SCREEN: STATUS_SCREENING,
    PHASE_CONTINUE: STATUS_CONTINUING,
    PHASE_FULL: STATUS_FULL,
}


class StarvationError(RuntimeError):
    """Too many prompts were screened without filling a batch (`max_screened_per_batch`)."""


class StarvationWarning(UserWarning):
    """The qualification rate of a batch window is below `warn_qualification_rate`."""


@dataclasses.dataclass(frozen=True)
class Request:
    """Generate `n` responses for dataset row `prompt_index`.

    engine_hint: for a continuation, the `engine` the driver passed to `submit` with the
    screening responses (so it can reuse that engine's prefix cache); otherwise None.
    """

    prompt_index: int
    n: int
    phase: str
    request_id: int
    epoch: int = 0
    engine_hint: Any = None


@dataclasses.dataclass
class Response:
    """One scored response. `payload` is opaque to the scheduler (token ids, text, ...);
    it must be picklable for `state_dict`."""

    reward: float
    num_tokens: int
    policy_version: int
    payload: Any = None

    def to_tuple(self) -> tuple:
        return (self.reward, self.num_tokens, self.policy_version, self.payload)


@dataclasses.dataclass
class Group:
    """A complete group of N responses for one prompt, screening responses first.

    n_screen: how many leading responses came from the first request (N_init for
    `speed`, N for strategies that request the whole group at once).
    """

    prompt_index: int
    epoch: int
    responses: list
    n_screen: int

    @property
    def rewards(self) -> np.ndarray:  # [N]
        return np.array([r.reward for r in self.responses], dtype=np.float64)

    @property
    def num_tokens(self) -> int:
        return sum(r.num_tokens for r in self.responses)


@dataclasses.dataclass
class Batch:
    """Exactly B groups of N responses, the metrics of its window, and a starvation
    warning when the window's qualification rate was low."""

    step: int
    groups: list
    metrics: dict
    starvation_warning: Optional[str] = None

    def rewards(self) -> np.ndarray:  # [B, N]
        return np.stack([g.rewards for g in self.groups])


@dataclasses.dataclass
class PromptState:
    """One prompt's lifecycle within one epoch (see the module docstring).

    request: the outstanding request while generating, None once ready.
    engine: the engine the driver reported for the last submitted request.
    n_screen: size of the first request, fixed when it is issued.
    """

    prompt_index: int
    epoch: int
    status: str
    responses: list = dataclasses.field(default_factory=list)
    request: Optional[Request] = None
    engine: Any = None
    n_screen: int = 0

    def to_group(self) -> Group:
        return Group(self.prompt_index, self.epoch, list(self.responses), self.n_screen)

    def to_plain(self) -> dict:
        """Plain picklable python for state_dict (no dataclasses)."""
        req = self.request
        return {
            "prompt_index": self.prompt_index,
            "epoch": self.epoch,
            "status": self.status,
            "responses": [r.to_tuple() for r in self.responses],
            "request": None if req is None else dataclasses.astuple(req),
            "engine": self.engine,
            "n_screen": self.n_screen,
        }

    @classmethod
    def from_plain(cls, d: dict) -> "PromptState":
        req = d["request"]
        return cls(
            prompt_index=d["prompt_index"],
            epoch=d["epoch"],
            status=d["status"],
            responses=[Response(*t) for t in d["responses"]],
            request=None if req is None else Request(*req),
            engine=d["engine"],
            n_screen=d["n_screen"],
        )
