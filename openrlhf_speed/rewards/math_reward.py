"""Math reward: 1.0 when a response's final answer equals the gold answer, else 0.0.

Per sample: extract the answer (extract.py) → fast path in this process when both answer
and gold are plain numbers → otherwise math-verify 0.9.0 in a worker process (pool.py)
under a hard timeout. Every call returns a `RewardResult` with one status of
`STATUSES` and never raises; statuses are tallied in thread-safe module counters
(`reward_counters()`) for metrics.

Fast path: exact rational comparison (`12` == `12.0`, `1,234` == `1234`, `3/4` == `0.75`).
Equal → correct; two unequal integers → wrong. Unequal non-integers go to math-verify,
which rounds (0.333333 vs 1/3 counts as equal there), so both paths agree.

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
import threading
from dataclasses import dataclass

from openrlhf_speed.rewards.extract import MAX_ANSWER_CHARS, extract_answer, normalize_gold, parse_plain_number
from openrlhf_speed.rewards.pool import WorkerPool

logger = logging.getLogger(__name__)

STATUSES = ("correct", "wrong", "no_answer", "timeout", "error")
ENV_TIMEOUT = "OPENRLHF_SPEED_REWARD_TIMEOUT"
ENV_WORKERS = "OPENRLHF_SPEED_REWARD_WORKERS"
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
    gold_text = normalize_gold(gold)
    if gold_text is None or len(gold_text) > MAX_ANSWER_CHARS:
        return RewardResult(0.0, "error", detail=f"unusable gold label of type {type(gold).__name__}")
    answer = extract_answer(response)
    if answer is None:
        return RewardResult(0.0, "no_answer")
    return compare_answers(answer, gold_text, timeout_s=timeout_s, pool=pool)


def compare_answers(
    answer: str, gold: str, *, timeout_s: float | None = None, pool: WorkerPool | None = None
) -> RewardResult:
    """Compare an extracted answer with a normalised gold answer (not counted)."""
    if len(answer) > MAX_ANSWER_CHARS:  # no gold answer is this long; spare the worker
        return RewardResult(0.0, "wrong", answer[:80] + "...", detail="answer too long")
    if answer.strip() == gold.strip():
        return RewardResult(1.0, "correct", answer)
    a, g = parse_plain_number(answer), parse_plain_number(gold)
    if a is not None and g is not None:
        if a == g:
            return RewardResult(1.0, "correct", answer)
        if a.denominator == 1 and g.denominator == 1:
            return RewardResult(0.0, "wrong", answer)
    if timeout_s is None:
        timeout_s = default_config().timeout_s
    outcome = (pool or default_pool()).call(_verify_task, answer, gold, timeout_s=timeout_s)
    if outcome.status != "ok":
        return RewardResult(0.0, outcome.status, answer, detail=outcome.detail)
    if outcome.value == "unparsable_gold":
        return RewardResult(0.0, "error", answer, detail=f"math-verify cannot parse gold {gold[:80]!r}")
    return RewardResult(1.0 if outcome.value == "correct" else 0.0, outcome.value, answer)


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
