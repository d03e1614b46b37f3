"""Reward validity for the SPEED driver: which rewards must not be trained on, what to do
with them, and when to stop the run.

A reward is invalid when it could not be computed, whatever number stands in its place:
- `raised`: the `--reward.remote_url` function raised (OpenRLHF logs it at info level and
  leaves the reward empty);
- `nonfinite`: NaN or inf (NaN counted as wrong for qualification, then made the group's
  RLOO advantages NaN);
- `error_status`: our reward function's own status "error" (`reward_error` = 1: worker
  died, unusable gold, response not found in the query); its 0.0 is a placeholder.
Timeouts and refusals (`reward_timeout`, `reward_refused`) are valid zeros: the response
built something too large to check, which is the policy's doing, so they are counted
(`reward/timeouts`, `reward/refused`) and trained on as wrong answers.

Decision: an invalid response is regenerated (same prompt, same engine), not trained on
and not given to qualification. Why not drop the prompt's group: a scorer failure says
nothing about the prompt's difficulty, dropping would bias the curriculum against prompts
whose answers trip the scorer, waste the group's valid responses, and need a new scheduler
path; regenerating keeps every group at N valid responses with no scheduler change. Its
cost is a conditioning on "the scorer succeeded", documented here.

Limits (`RewardError` stops the run, with the prompt row and the flag to change):
- one response slot still invalid after `retries` regenerations (default 2: three tries):
  the failure is systematic for that prompt (a bad label, a scorer bug);
- invalid rewards above `max_error_rate` (default 0.02) of all responses scored so far,
  checked once `min_scored` (100) responses were scored: a flaky scorer.
Imports only the standard library.
"""

from __future__ import annotations

import collections
import math

DEFAULT_MAX_ERROR_RATE = 0.02
DEFAULT_RETRIES = 2
MIN_SCORED = 100
REASONS = ("raised", "nonfinite", "error_status")


class RewardError(RuntimeError):
    """Rewards could not be computed often enough that training on them would be wrong."""


def invalid_reason(reward, info: dict | None = None) -> str | None:
    """Why a scored response must not be trained on (one of REASONS), or None.
    reward: a float, a one-element tensor/list, or None; info: the sample's extra logs."""
    if reward is None:
        return "raised"
    if hasattr(reward, "tolist"):
        reward = reward.tolist()
    if isinstance(reward, (list, tuple)):
        if len(reward) != 1:
            return "nonfinite"
        reward = reward[0]
    try:
        if not math.isfinite(float(reward)):
            return "nonfinite"
    except (TypeError, ValueError):
        return "nonfinite"
    if info and _flag(info.get("reward_error")):
        return "error_status"
    return None


def _flag(value) -> bool:
    if value is None:
        return False
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return any(float(v) > 0 for v in value)
    return float(value) > 0


class RewardGuard:
    """Counts scored responses by validity and decides when the run must stop."""

    def __init__(self, max_error_rate: float = DEFAULT_MAX_ERROR_RATE, retries: int = DEFAULT_RETRIES,
                 min_scored: int = MIN_SCORED):
        if not 0.0 <= max_error_rate <= 1.0:
            raise ValueError(f"--speed.reward_max_error_rate must be in [0, 1], got {max_error_rate}")
        if retries < 0:
            raise ValueError(f"--speed.reward_retries must be >= 0, got {retries}")
        self.max_error_rate, self.retries, self.min_scored = max_error_rate, retries, min_scored
        self.window: collections.Counter = collections.Counter()
        self.totals: collections.Counter = collections.Counter()

    def observe(self, reasons: list, infos: list) -> None:
        """Count one request's scored responses: reasons[i] from `invalid_reason`."""
        counts = collections.Counter(scored=len(reasons))
        for reason, info in zip(reasons, infos):
            if reason is not None:
                counts["errors"] += 1
                counts[f"errors_{reason}"] += 1
            elif info:
                counts["timeouts"] += int(_flag(info.get("reward_timeout")))
                counts["refused"] += int(_flag(info.get("reward_refused")))
        self.window.update(counts)
        self.totals.update(counts)

    def check(self, prompt_index: int, attempt: int, reasons: list, label=None) -> None:
        """Raise RewardError when a limit is passed (see the module docstring).
        attempt: how many times this request's invalid slots were already regenerated."""
        bad = [r for r in reasons if r is not None]
        if bad and attempt >= self.retries:
            raise RewardError(
                f"the reward of prompt row {prompt_index} (label {str(label)[:80]!r}) could not be computed "
                f"for {len(bad)} response(s) after {attempt + 1} generations (reasons: "
                f"{', '.join(sorted(set(bad)))}): a systematic failure. Check that row's label and the reward "
                "function (its exceptions are logged at INFO level by OpenRLHF's agent executor), or raise "
                f"--speed.reward_retries (now {self.retries})."
            )
        scored, errors = self.totals["scored"], self.totals["errors"]
        if scored >= self.min_scored and errors > self.max_error_rate * scored:
            raise RewardError(
                f"{errors} of {scored} rewards could not be computed ({errors / scored:.1%} > "
                f"--speed.reward_max_error_rate {self.max_error_rate:.1%}; by reason: "
                f"{ {r: self.totals[f'errors_{r}'] for r in REASONS} }). Fix the reward function, or raise "
                "--speed.reward_max_error_rate to keep regenerating those responses."
            )

    def count_regenerated(self, n: int) -> None:
        self.window["regenerated"] += n
        self.totals["regenerated"] += n

    def pop_metrics(self) -> dict:
        """`reward/*` metrics of the window since the last call, plus run totals."""
        w, t = self.window, self.totals
        out = {f"reward/{k}": float(w[k]) for k in ("scored", "errors", "timeouts", "refused", "regenerated")}
        out.update({f"reward/errors_{r}": float(w[f"errors_{r}"]) for r in REASONS})
        out["reward/error_rate_cum"] = t["errors"] / t["scored"] if t["scored"] else 0.0
        out["reward/timeouts_cum"] = float(t["timeouts"])
        self.window = collections.Counter()
        return out

    def state_dict(self) -> dict:
        return {"totals": dict(self.totals)}

    def load_state_dict(self, state: dict) -> None:
        self.totals = collections.Counter(state.get("totals", {}))
