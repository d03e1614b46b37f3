"""OpenRLHF reward adapter: pass this file's path as `--reward.remote_url`.

OpenRLHF 0.11.2's `SingleTurnAgentExecutor` loads the file by path and calls
`reward_func(queries, prompts, labels)` through `asyncio.to_thread` with one-element
lists, where query = decode(prompt_tokens + response_tokens, skip_special_tokens=False).
From the returned dict it reads "rewards", "scores" and "extra_logs" and builds
`torch.tensor([reward])` and `torch.tensor([value])` per extra_logs entry. So for one
query every value returned here is a Python float: downstream that is a float32 tensor of
shape [1] per sample. (Called with n > 1 queries, values are lists of n floats.)

Only the response is scored: prompts carry few-shot worked examples with their own
`\\boxed{}` answers. `split_response` (extract.py) cuts the response off the query: after
the prompt verbatim, else after the prompt up to whitespace, else after the last
assistant-turn marker, else after the prompt's last 64 characters; trailing special tokens
(`<|im_end|>`, `</s>`, `<|endoftext|>`, ...) are removed. A query where none applies
scores 0 with status "error" and a warning, never the whole query.

extra_logs carries per-sample 0.0/1.0 indicators `reward_timeout`, `reward_refused`,
`reward_error`, `reward_no_answer` for the trainer to average into metrics, and
`reward_time` (seconds). `reward_error` = 1 means no reward could be computed (worker died,
unusable gold, response not found in the query): the reward 0.0 returned with it is a
placeholder, and the SPEED driver regenerates such responses instead of training on them
(rollout/reward_guard.py).

Environment (see math_reward.py): OPENRLHF_SPEED_REWARD_TIMEOUT (seconds per math-verify
call, default 5), OPENRLHF_SPEED_REWARD_WORKERS (worker processes, default 2). They are
validated when this file is loaded, so a typo fails at startup instead of zeroing rewards
(OpenRLHF logs reward exceptions at info level and carries on).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

try:
    import openrlhf_speed  # noqa: F401
except ImportError:  # loaded by path from a source checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from openrlhf_speed.rewards.extract import split_response  # noqa: E402
from openrlhf_speed.rewards.math_reward import COUNTERS, RewardResult, default_config, math_reward  # noqa: E402

logger = logging.getLogger(__name__)
EXTRA_LOG_STATUSES = {
    "reward_timeout": "timeout",
    "reward_refused": "refused",
    "reward_error": "error",
    "reward_no_answer": "no_answer",
}
_warned_unsplit = False

default_config()  # fail fast on malformed OPENRLHF_SPEED_REWARD_* values


def score_query(query, prompt, label) -> RewardResult:
    """Score the response part of one OpenRLHF query against its label."""
    global _warned_unsplit
    if isinstance(query, bytes):
        query = query.decode("utf-8", errors="replace")
    if isinstance(prompt, bytes):
        prompt = prompt.decode("utf-8", errors="replace")
    response = split_response(query, prompt)
    if response is None:
        if not _warned_unsplit:  # once: a systematic mismatch would flood the log
            _warned_unsplit = True
            logger.warning(
                "reward_func: cannot locate the response in a query (prompt type %s); scored 0 "
                "(see split_response for the rule)",
                type(prompt).__name__,
            )
        COUNTERS.add("error")
        return RewardResult(0.0, "error", detail="response not found in query")
    return math_reward(response, label)


def reward_func(queries, prompts, labels, **kwargs) -> dict:
    """OpenRLHF entry point: {"rewards", "scores", "extra_logs"} for the given queries."""
    t0 = time.perf_counter()
    n = len(queries)
    prompts = list(prompts) if prompts is not None else [None] * n
    labels = list(labels) if labels is not None else [None] * n
    results = [
        score_query(queries[i], prompts[i] if i < len(prompts) else None, labels[i] if i < len(labels) else None)
        for i in range(n)
    ]
    rewards = [r.reward for r in results]
    extra_logs = {key: [float(r.status == status) for r in results] for key, status in EXTRA_LOG_STATUSES.items()}
    # Seconds spent scoring, spread over the samples: the trainer sums it into timing_parts/reward.
    extra_logs["reward_time"] = [(time.perf_counter() - t0) / max(n, 1)] * n
    if n == 1:  # OpenRLHF wraps each value as torch.tensor([value]): keep them scalar
        return {"rewards": rewards[0], "scores": rewards[0], "extra_logs": {k: v[0] for k, v in extra_logs.items()}}
    return {"rewards": rewards, "scores": rewards, "extra_logs": extra_logs}
