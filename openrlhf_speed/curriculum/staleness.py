"""The staleness bound: how old a group's first-request (screening) samples may be when
the group trains, and what happens to a group that is older.

Age = policy version at training time - policy version that generated the samples (the
driver bumps the version once per weight sync). Screening samples are the oldest of a
group: its continuation is generated after them, so bounding them bounds the whole group.

A group whose screening is older than `--speed.max_staleness` is never trained (the
trainer's flag defaults to 2; SpeedConfig's field to None, no bound, the paper's algorithm). Its prompt
is *screened again* with the current policy (all its responses are discarded and counted),
not dropped. Why re-screen rather than drop: the groups that age past the bound are almost
all qualified ones waiting in the buffer, the most useful prompts of the epoch; dropping
them would lose them for the epoch, while a fresh screening costs only N_init responses and
re-checks the qualification under the policy that will train on it (a prompt may have left
the band meanwhile). It always makes progress: a group only ages while batches are trained.

Bound 0 is strictly on-policy: everything pre-fetched before a weight sync is re-screened
after it, so pre-fetching then only fills the engines while the actor trains.

Departure from the paper: the paper trains screening samples from older policies as
on-policy, with no bound; so does its reference code.
"""

from __future__ import annotations

from typing import Optional

REASON_STALE = "stale_rescreen"


def screening_age(group_or_state, policy_version: int) -> int:
    """Age in policy versions of the oldest of the first request's samples."""
    first = group_or_state.responses[: group_or_state.n_screen]
    return policy_version - min(r.policy_version for r in first)


def stale_reason(age: int, max_staleness: Optional[int]) -> Optional[str]:
    """REASON_STALE when samples of this age may not train under the bound, else None."""
    if max_staleness is not None and age > max_staleness:
        return REASON_STALE
    return None


def staleness_histogram(groups: list, policy_version: int, max_staleness: int) -> dict:
    """speed/staleness_screen_hist_{age}: trained groups per screening age, zero-filled
    for 0..max_staleness so logger keys are stable (no group trains older than that)."""
    hist = {f"speed/staleness_screen_hist_{a}": 0.0 for a in range(max_staleness + 1)}
    for g in groups:
        key = f"speed/staleness_screen_hist_{screening_age(g, policy_version)}"
        hist[key] = hist.get(key, 0.0) + 1.0
    return hist
