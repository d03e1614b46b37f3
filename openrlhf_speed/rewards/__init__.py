"""Verifiable math reward: answer extraction + math-verify under a hard per-call timeout.

- extract.py: final-answer extraction, gold normalisation, response/prompt splitting.
- pool.py: persistent spawn-started worker processes; overrunning calls are killed.
- math_reward.py: `math_reward(response, gold) -> RewardResult`, status counters, config,
  `gold_problem(label)` (why a label cannot be scored against).
- size.py: a cheap size estimate that refuses huge numbers before math-verify.
- reward_func.py: the OpenRLHF `--reward.remote_url` file (`reward_func`).

The scoring function is imported from its module,
`from openrlhf_speed.rewards.math_reward import math_reward`: re-exporting it here would
shadow the submodule of the same name. Imports only the standard library (math-verify is
imported inside the workers).
"""

from openrlhf_speed.rewards.extract import extract_answer, normalize_gold, split_response
from openrlhf_speed.rewards.math_reward import (
    STATUSES,
    RewardConfig,
    RewardResult,
    compare_answers,
    configure,
    gold_problem,
    reset_reward_counters,
    reward_counters,
    shutdown,
)
from openrlhf_speed.rewards.pool import CallOutcome, WorkerPool

__all__ = [
    "STATUSES",
    "CallOutcome",
    "RewardConfig",
    "RewardResult",
    "WorkerPool",
    "compare_answers",
    "configure",
    "extract_answer",
    "gold_problem",
    "normalize_gold",
    "reset_reward_counters",
    "reward_counters",
    "shutdown",
    "split_response",
]
