"""Per-prompt outcome history in preallocated arrays, and the small math built on it.

Legend: P prompts in the dataset; a *visit* is one prompt's pass through the scheduler in
one epoch (its screening, continuation or full request, until it is accepted or rejected).

`PromptHistory` keeps, per prompt, exactly what the history-based strategies read:

    correct, wrong  float32 [P]  decayed counts of correct / incorrect responses (every
                                 scored request adds to them): the Beta posterior's data
    last_epoch      int32   [P]  epoch of the last scored request; -1 = never scored
    streak          int8    [P]  consecutive zero-variance visits, most recent last:
                                 +k = the last k visits were all correct, -k = all wrong,
                                 0 = the last visit was mixed (or none yet); saturates at
                                 +-127 (GRESO's keep probability p^127 is below any floor)

That is `BYTES_PER_PROMPT` = 13 bytes, allocated once: 13 MB for a million prompts, and it
never grows with the run's length. The previous dict-of-lists history grew with the number of
prompts seen times eight records and was not bounded in bytes.

Decay: counts are multiplied by `decay ** (epochs since the prompt's last scored request)`,
applied lazily when the prompt is read or written, so an old observation weighs less and the
posterior drifts back to its prior while a prompt is not seen (a changing policy is noticed).
Decay is per epoch, not per policy version: a prompt is observed about once per epoch, so a
per-epoch factor means "remember about 1 / (1 - decay) visits" whatever the dataset size.

Not in the papers: GRESO (arXiv 2506.02177) keeps a full per-prompt reward trace and CurES
(arXiv 2510.01037) per-prompt counters in python dicts; here both read these arrays.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

BYTES_PER_PROMPT = 4 + 4 + 4 + 1
_STREAK_MAX = 127
_FIELDS = ("correct", "wrong", "last_epoch", "streak")


class PromptHistory:
    """Bounded per-prompt history (see the module docstring for the arrays).

    Decision context, set by the scheduler before every strategy call, so strategies keep
    the registry's two-argument signatures:
        epoch  the epoch of the visit being decided
        phase  the phase of the request just scored (None in `start`)
        groups_coming  complete groups plus continuations in flight, this prompt's aside
               (Scheduler.groups_coming): how many groups train before one started now
    """

    def __init__(self, num_prompts: int, decay: float = 1.0) -> None:
        self.num_prompts = num_prompts
        self.decay = decay
        self.correct = np.zeros(num_prompts, dtype=np.float32)
        self.wrong = np.zeros(num_prompts, dtype=np.float32)
        self.last_epoch = np.full(num_prompts, -1, dtype=np.int32)
        self.streak = np.zeros(num_prompts, dtype=np.int8)
        self.epoch = 0
        self.phase: Optional[str] = None
        self.groups_coming = 0

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in _FIELDS)

    # ---- writes (the scheduler) ------------------------------------------------------

    def record(self, prompt_index: int, epoch: int, n_correct: int, n: int) -> None:
        """One scored request of `n` responses, `n_correct` of them correct."""
        i = prompt_index
        last = int(self.last_epoch[i])
        if last >= 0 and epoch > last and self.decay != 1.0:
            f = np.float32(self.decay ** (epoch - last))
            self.correct[i] *= f
            self.wrong[i] *= f
        self.correct[i] += np.float32(n_correct)
        self.wrong[i] += np.float32(n - n_correct)
        # A visit of an older epoch may finish after a newer one started (tiny datasets).
        self.last_epoch[i] = max(last, epoch)

    def finish(self, prompt_index: int, n_correct: int, n: int) -> None:
        """The visit ended (accepted or rejected) with n_correct of its n responses correct."""
        s = int(self.streak[prompt_index])
        if n_correct == n:
            s = min(s + 1, _STREAK_MAX) if s > 0 else 1
        elif n_correct == 0:
            s = max(s - 1, -_STREAK_MAX) if s < 0 else -1
        else:
            s = 0
        self.streak[prompt_index] = s

    # ---- reads (the strategies) ------------------------------------------------------

    def seen(self, prompt_index: int) -> bool:
        return bool(self.last_epoch[prompt_index] >= 0)

    def counts(self, prompt_index: int, epoch: Optional[int] = None) -> tuple[float, float]:
        """(correct, wrong), decayed to `epoch` (default: the decision context's epoch)."""
        epoch = self.epoch if epoch is None else epoch
        last = int(self.last_epoch[prompt_index])
        f = self.decay ** max(0, epoch - last) if last >= 0 else 1.0
        return float(self.correct[prompt_index]) * f, float(self.wrong[prompt_index]) * f

    def counts_all(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(correct, wrong) of every prompt decayed to `epoch`: two float64 [P]."""
        age = np.maximum(epoch - self.last_epoch.astype(np.int64), 0)  # [P]; never seen: counts are 0
        f = np.power(self.decay, age, dtype=np.float64)
        return self.correct * f, self.wrong * f

    # ---- checkpointing -----------------------------------------------------------------

    def state_dict(self) -> dict:
        return {f: getattr(self, f).copy() for f in _FIELDS}

    def load_state_dict(self, d: dict) -> None:
        for f in _FIELDS:
            arr = np.asarray(d[f], dtype=getattr(self, f).dtype)
            if arr.shape != (self.num_prompts,):
                raise ValueError(f"history field {f!r} has shape {arr.shape}, expected ({self.num_prompts},)")
            setattr(self, f, arr.copy())

    def load_records_v1(self, records: dict) -> None:
        """Replay a format-1 checkpoint's per-prompt records (epoch, version, phase, n,
        n_correct, reward_sum) into the counts. Visits cannot be told apart there, so
        streaks start at 0; only speed/dapo/uniform existed then, and they read none of it."""
        for i, recs in records.items():
            for epoch, _, _, n, n_correct, _ in sorted(recs, key=lambda r: r[0]):
                self.record(int(i), int(epoch), int(n_correct), int(n))


def decision_uniform(seed: int, salt: int, prompt_index: int, epoch: int) -> float:
    """A uniform draw in [0, 1) that depends only on (seed, salt, prompt, epoch).

    Why keyed and not one RNG stream: a stream's position would be state to checkpoint,
    and each draw would depend on the order prompts are decided in. A keyed draw replays
    exactly after a restore, whatever the engines' completion order. SplitMix64 (Steele et
    al. 2014) chained over the keys: ~2 us a draw, 20x cheaper than a seeded numpy Generator,
    which matters at millions of prompts per epoch."""
    h = 0
    for key in (seed, salt, prompt_index, epoch):
        h = _splitmix64((h ^ (key & _MASK64)) + 0x9E3779B97F4A7C15)
    return (h >> 11) / float(1 << 53)


_MASK64 = (1 << 64) - 1


def _splitmix64(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)
