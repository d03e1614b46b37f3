"""Math reward: 1.0 when a response's final answer equals the gold answer, else 0.0.

Per sample: extract the answer (extract.py) → fast path in this process when both answer
and gold are plain numbers → otherwise math-verify 0.9.0 in a worker process (pool.py)
under a hard timeout. Every call returns a `RewardResult` with one status of
`STATUSES` and never raises; statuses are tallied in thread-safe module counters
(`reward_counters()`) for metrics.

Fast path: exact rational comparison (`12` == `12.0`, `1,234` == `1234`, `3/4` == `0.75`).
Equal → correct; two unequal integers → wrong. Unequal non-integers go to math-verify,
which rounds (0.333333 vs 1/3 counts as equal there), so both paths agree.

Edge cases, each decided before any worker is used:
- Long answers: a plain decimal number of any length is compared exactly in its canonical
  spelling (`canonical_decimal`), so a 5,000-digit gold answer can be matched. Any other
  text longer than MAX_ANSWER_CHARS (1,000) is never given to math-verify: a long answer
  scores "wrong", a long gold answer that is not a plain number is refused by
  `gold_problem` (status "error"; the data loader can call it to name the row up front).
- Not-a-number: a gold answer spelling NaN is refused (`gold_problem`); an answer spelling
  NaN is "wrong". Exact text equality is not taken as correctness for `nan` or `inf`
  spellings; `inf`/`\\infty` go to math-verify, which treats them as infinity.
- Huge numbers: an answer whose numbers would have more than size.MAX_DIGITS digits
  (`10^{10^{10}}`, `1000000!`, towers of exponents) scores 0 with status "refused" at once,
  instead of running into the timeout (see size.py for the estimate and its measurements).

math-verify is called with `parse(..., parsing_timeout=None)` and
`verify(..., timeout_seconds=None)`: its own SIGALRM timeouts refuse to run off the main
thread. Answers and gold are wrapped in `\\boxed{}` before parsing, which makes math-verify
read bare LaTeX (`\\frac{1}{2}`, `x=5`) the way it reads a final answer.

Configuration (arguments win over environment):
- OPENRLHF_SPEED_REWARD_TIMEOUT: seconds per math-verify call (default 5).
- OPENRLHF_SPEED_REWARD_WORKERS: worker processes (default 2).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
from dataclasses import dataclass

from openrlhf_speed.rewards.extract import (
    MAX_ANSWER_CHARS,
    canonical_decimal,
    extract_answer,
    is_nan_text,
    normalize_gold,
    parse_plain_number,
)
from openrlhf_speed.rewards.pool import WorkerPool
from openrlhf_speed.rewards.size import size_problem

logger = logging.getLogger(__name__)

# "timeout" and "refused" (too large to verify, see size.py) score 0 like "wrong" and are
# counted apart; "error" means the reward could not be computed (see reward_func.py).
STATUSES = ("correct", "wrong", "no_answer", "timeout", "refused", "error")
ENV_TIMEOUT = "OPENRLHF_SPEED_REWARD_TIMEOUT"
ENV_WORKERS = "OPENRLHF_SPEED_REWARD_WORKERS"
# Gold answers that spell infinity: equal text is not enough, math-verify decides.
_INF_RE = re.compile(r"inf|\\infty|\boo\b", re.I)
# A response longer than this is not scanned at all (status "error"): extraction is linear,
# but a multi-megabyte generation is already broken and not worth the time.
MAX_RESPONSE_CHARS = 2_000_000


@dataclass(frozen=True)
class RewardResult:
    reward: float  # 1.0 or 0.0
    status: str  # one of STATUSES
    answer: str | None = None  # extracted answer, when there was one
    detail: str = ""  # why, for "error" and "timeout"


@dataclass(frozen=True)
class RewardConfig:
    timeout_s: float = 5.0
    num_workers: int = 2

    @classmethod
    def from_env(cls, environ=None) -> "RewardConfig":
        """Read the env vars; a malformed value raises ValueError naming the variable."""
        env = os.environ if environ is None else environ
        timeout_s, num_workers = cls.timeout_s, cls.num_workers
        try:
            if env.get(ENV_TIMEOUT, "").strip():
                timeout_s = float(env[ENV_TIMEOUT])
            if env.get(ENV_WORKERS, "").strip():
                num_workers = int(env[ENV_WORKERS])
        except ValueError as e:
            raise ValueError(f"{ENV_TIMEOUT} must be a number and {ENV_WORKERS} an integer: {e}") from e
        if not timeout_s > 0:
            raise ValueError(f"{ENV_TIMEOUT} must be > 0 seconds, got {timeout_s}")
        if num_workers < 1:
            raise ValueError(f"{ENV_WORKERS} must be >= 1, got {num_workers}")
        return cls(timeout_s=timeout_s, num_workers=num_workers)


class StatusCounters:
    """Thread-safe tally of reward statuses."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(STATUSES, 0)

    def add(self, status: str) -> None:
        with self._lock:
            self._counts[status] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(STATUSES, 0)


COUNTERS = StatusCounters()
_pool_lock = threading.Lock()
_default_pool: WorkerPool | None = None
_default_config: RewardConfig | None = None


def reward_counters() -> dict[str, int]:
    """Counts of each status since start (or the last reset), e.g. {"correct": 3, ...}."""
    return COUNTERS.snapshot()


def reset_reward_counters() -> None:
    COUNTERS.reset()


def configure(timeout_s: float | None = None, num_workers: int | None = None) -> RewardConfig:
    """Set the default timeout / pool size (unset values come from the environment)."""
    global _default_config, _default_pool
    base = RewardConfig.from_env()
    config = RewardConfig(
        timeout_s=base.timeout_s if timeout_s is None else float(timeout_s),
        num_workers=base.num_workers if num_workers is None else int(num_workers),
    )
    if not config.timeout_s > 0 or config.num_workers < 1:
        raise ValueError(f"need timeout_s > 0 and num_workers >= 1, got {config}")
    with _pool_lock:
        old, _default_pool, _default_config = _default_pool, None, config
    if old is not None:
        old.close()
    return config


def default_config() -> RewardConfig:
    """The configuration set by `configure`, else the one from the environment."""
    global _default_config
    with _pool_lock:
        if _default_config is None:
            _default_config = RewardConfig.from_env()
        return _default_config


def default_pool() -> WorkerPool:
    """The process-wide worker pool, created on first use."""
    global _default_pool
    config = default_config()
    with _pool_lock:
        if _default_pool is None:
            _default_pool = WorkerPool(config.num_workers, initializer=_warm_up_worker)
        return _default_pool


@atexit.register
def shutdown() -> None:
    """Kill the default pool's workers (also registered atexit)."""
    global _default_pool
    with _pool_lock:
        pool, _default_pool = _default_pool, None
    if pool is not None:
        pool.close()


def math_reward(response, gold, *, timeout_s: float | None = None, pool: WorkerPool | None = None) -> RewardResult:
    """Score one response against one gold answer; counted in `reward_counters()`.

    `response`: str (bytes are decoded; anything else is status "error").
    `gold`: str/int/float label; `$...$` and `\\boxed{...}` are unwrapped.
    """
    try:
        result = _score(response, gold, timeout_s, pool)
    except Exception as e:  # a bug here must cost one sample, not the training step
        logger.warning("math_reward failed: %s: %s", type(e).__name__, str(e)[:200])
        result = RewardResult(0.0, "error", detail=f"{type(e).__name__}: {str(e)[:200]}")
    COUNTERS.add(result.status)
    return result


def _score(response, gold, timeout_s, pool) -> RewardResult:
    if isinstance(response, bytes):
        response = response.decode("utf-8", errors="replace")
    if not isinstance(response, str):
        return RewardResult(0.0, "error", detail=f"response is {type(response).__name__}, not str")
    if len(response) > MAX_RESPONSE_CHARS:
        return RewardResult(0.0, "error", detail=f"response longer than {MAX_RESPONSE_CHARS} chars")
    problem = gold_problem(gold)
    if problem is not None:
        return RewardResult(0.0, "error", detail=f"unusable gold label: {problem}")
    gold_text = normalize_gold(gold)
    answer = extract_answer(response)
    if answer is None:
        return RewardResult(0.0, "no_answer")
    return compare_answers(answer, gold_text, timeout_s=timeout_s, pool=pool)


def compare_answers(
    answer: str, gold: str, *, timeout_s: float | None = None, pool: WorkerPool | None = None
) -> RewardResult:
    """Compare an extracted answer with a normalised gold answer (not counted)."""
    if is_nan_text(answer):
        return RewardResult(0.0, "wrong", answer, detail="not a number")
    if len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return _compare_long(answer, gold)
    if answer.strip() == gold.strip() and not _INF_RE.search(gold):
        return RewardResult(1.0, "correct", answer)
    a, g = parse_plain_number(answer), parse_plain_number(gold)
    if a is not None and g is not None:
        if a == g:
            return RewardResult(1.0, "correct", answer)
        if a.denominator == 1 and g.denominator == 1:
            return RewardResult(0.0, "wrong", answer)
    problem = size_problem(answer)
    if problem is not None:
        return RewardResult(0.0, "refused", answer[:80], detail=f"answer {problem}")
    if timeout_s is None:
        timeout_s = default_config().timeout_s
    outcome = (pool or default_pool()).call(_verify_task, answer, gold, timeout_s=timeout_s)
    if outcome.status != "ok":
        return RewardResult(0.0, outcome.status, answer, detail=outcome.detail)
    if outcome.value == "unparsable_gold":
        return RewardResult(0.0, "error", answer, detail=f"math-verify cannot parse gold {gold[:80]!r}")
    return RewardResult(1.0 if outcome.value == "correct" else 0.0, outcome.value, answer)


def _compare_long(answer: str, gold: str) -> RewardResult:
    """Either side longer than MAX_ANSWER_CHARS: exact comparison of plain decimals only;
    other long text is never given to math-verify (see the module docstring)."""
    a, g = canonical_decimal(answer), canonical_decimal(gold)
    shown = answer if len(answer) <= 80 else answer[:80] + "..."
    if a is not None and g is not None:
        return RewardResult(1.0 if a == g else 0.0, "correct" if a == g else "wrong", shown)
    return RewardResult(0.0, "wrong", shown, detail="long answer that is not a plain number")


def gold_problem(label) -> str | None:
    """Why `label` cannot serve as a gold answer, or None. Cheap (linear): the data loader
    can call it on every row to refuse a dataset up front, naming the row."""
    gold = normalize_gold(label)
    if gold is None:
        return f"empty or of type {type(label).__name__}"
    if is_nan_text(gold):
        return f"{gold!r} is not a number"
    if len(gold) > MAX_ANSWER_CHARS and canonical_decimal(gold) is None:
        return f"{len(gold)} characters and not a plain number (math-verify is given at most {MAX_ANSWER_CHARS})"
    problem = size_problem(gold) if len(gold) <= MAX_ANSWER_CHARS else None
    return None if problem is None else f"{gold[:80]!r} {problem}"


# -- worker side (runs in the pool's processes) --------------------------------------------


def _warm_up_worker() -> None:
    """Import math-verify and parse once, so the first real call's timeout is not spent
    importing sympy and building the LaTeX parser."""
    # It warns once that its timeout is disabled: intended here, the pool enforces it.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    _verify_task("\\frac{1}{2}", "0.5")


def _verify_task(answer: str, gold: str) -> str:
    """"correct", "wrong" or "unparsable_gold" (math-verify; no own timeout)."""
    from math_verify import parse, verify

    gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=None)
    if not gold_parsed:
        return "unparsable_gold"
    answer_parsed = parse("\\boxed{" + answer + "}", parsing_timeout=None)
    if not answer_parsed:
        return "wrong"
    return "correct" if verify(gold_parsed, answer_parsed, timeout_seconds=None) else "wrong"
