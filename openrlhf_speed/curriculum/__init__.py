"""SPEED online curriculum, engine-free (SPEED-RL, Zhang et al. 2025, arXiv 2506.09016).

Pure logic: imports only the standard library and numpy, so the same scheduler runs
against vLLM engines, the CPU engine, a user's own engine, or a simulated policy
(tests/curriculum/test_import_boundary.py holds it so).

A screening of N_init responses decides whether a prompt gets the rest of its N: it
qualifies when its pass rate lies strictly inside (pass_rate_low, pass_rate_high); every
batch is exactly B complete groups of N, screening first. Strategies are registered by name
(`register_strategy`): `speed` (default), `dapo`, `uniform`, the history-based `greso`,
`cures` and `speed_bayes` (history_strategies.py), `speed_seq` (seq_screen.py),
`speed_thin` (thin_screen.py) and `speed_keep` (keep_screen.py);
`compare.compare_strategies` runs several of them on one simulated policy.

The driver's contract (`Scheduler`: next_requests, submit, pop_batch, state_dict):
- `next_requests()` returns only new work, each request once; a continuation carries
  `engine_hint`, the `engine` passed to `submit` with its screening (prefix cache);
- `submit` takes all `n` responses of a request at once;
- after `load_state_dict(d)` the next `next_requests()` hands out again every request that
  was outstanding at save time (same ids): the driver drops any results of requests it
  started before the restore;
- validation errors name the command-line flags (`FLAGS`), e.g. `--speed.n_init`.

A driving loop: docs/design.md#driving-the-curriculum-with-your-own-engine; every policy
(buffer bound, starvation, epoch end, state): docs/design.md#the-schedulers-policies; the
metric keys: metrics.py.
"""

from .config import FLAGS, SpeedConfig
from .records import (Batch, Group, PromptState, Request, Response, StarvationError,
                      StarvationWarning)
from .history import BYTES_PER_PROMPT, PromptHistory
from .scheduler import Scheduler
from .strategies import STRATEGIES, Decision, Strategy, pass_rate, qualify, register_strategy
from . import history_strategies  # noqa: F401,E402  (registers greso, cures, speed_bayes)
from . import seq_screen  # noqa: F401,E402  (registers speed_seq)
from . import thin_screen  # noqa: F401,E402  (registers speed_thin)
from . import keep_screen  # noqa: F401,E402  (registers speed_keep)

__all__ = [
    "BYTES_PER_PROMPT",
    "FLAGS",
    "STRATEGIES",
    "Batch",
    "Decision",
    "Group",
    "PromptHistory",
    "PromptState",
    "Request",
    "Response",
    "Scheduler",
    "SpeedConfig",
    "StarvationError",
    "StarvationWarning",
    "Strategy",
    "pass_rate",
    "qualify",
    "register_strategy",
]
