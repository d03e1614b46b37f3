"""SPEED online curriculum, engine-free (SPEED-RL, Zhang et al. 2025, arXiv 2506.09016).

Pure logic: imports only the standard library and numpy, so the same scheduler runs
against vLLM engines, the CPU engine, a user's own engine, or a simulated policy.

Algorithm (N = `n_samples_per_prompt`, N_init screening responses, N_cont = N - N_init,
B = prompts per training batch):
  1. screen: a new prompt gets N_init responses, which are scored;
  2. qualify: it is kept when its screening pass rate (fraction of responses with reward
     >= `correct_threshold`) lies strictly inside (pass_rate_low, pass_rate_high), (0, 1)
     by default; decisions return a reason that becomes a counter;
  3. continue: a kept prompt gets N_cont more responses; screening + continuation form its
     contiguous group of N (screening first);
  4. pre-fetch: continuations and new screenings are handed out together, up to
     `max_inflight_prompts` prompts in flight;
  5. buffer: complete groups wait for later steps; every batch has exactly B groups.
Strategies: `speed` (above, default), `dapo` (request N, keep groups inside the band),
`uniform` (request N, keep all), and history-based ones that read a bounded per-prompt
history (`PromptHistory`, 13 bytes per prompt, checkpointed): `greso` (skip prompts with
zero-variance streaks before rollout, GRESO arXiv 2506.02177), `cures` (posterior-weighted
epoch order and posterior-sized first requests, CurES arXiv 2510.01037), `speed_bayes`
(SPEED whose posterior skips confident screenings and admits confident prompts without
one); see `history_strategies.py`. More can be registered by name (`register_strategy`).
`compare.compare_strategies` runs several of them on one simulated policy.

Driving it with your own engine::

    from openrlhf_speed.curriculum import SpeedConfig, Scheduler, Response

    cfg = SpeedConfig(n_samples_per_prompt=8, n_init=4, batch_prompts=B,
                      max_inflight_prompts=4 * B, buffer_size=5 * B, strategy="speed",
                      pass_rate_low=0.0, pass_rate_high=1.0, seed=0, num_epochs=1)
    sched = Scheduler(num_prompts=len(dataset), config=cfg)   # validates cfg
    while not sched.exhausted:
        batch = None
        while batch is None and not sched.exhausted:
            for req in sched.next_requests():     # Request(prompt_index, n, phase,
                engine_pool.start(req)            #   request_id, epoch, engine_hint)
            for req, outputs, engine in engine_pool.finished():
                sched.submit(req.request_id, [
                    Response(reward=score(o), num_tokens=len(o.token_ids),
                             policy_version=version_that_generated(o), payload=o)
                    for o in outputs], engine=engine)   # len == req.n
            batch = sched.pop_batch()             # Batch(step, groups, metrics, warning)
        if batch is not None:
            train(batch.groups)                   # B groups x N responses, screening first
            log(batch.metrics)                    # "speed/..." floats
            sync_weights(); sched.policy_version += 1
    log(sched.totals())                           # incl. groups dropped at the end

- `next_requests()` returns only new work; each request is returned once. A continuation
  carries `engine_hint`, the `engine` passed to `submit` with its screening (prefix cache).
- `submit` takes all `n` responses of a request at once.
- `state_dict()` / `load_state_dict(d)`: plain picklable python and numpy arrays. After a restore the next
  `next_requests()` hands out again every request that was outstanding at save time (same
  ids); the driver must drop any results of requests it started before the restore.
- Validation errors name the command-line flags (`FLAGS`), e.g. `--speed.n_init`.

See `scheduler.py` for the documented policies (buffer bound, starvation, epoch end) and
`metrics.py` for the metric keys.
"""

from .config import FLAGS, SpeedConfig
from .records import (Batch, Group, PromptState, Request, Response, StarvationError,
                      StarvationWarning)
from .history import BYTES_PER_PROMPT, PromptHistory
from .scheduler import Scheduler
from .strategies import STRATEGIES, Decision, Strategy, pass_rate, qualify, register_strategy
from . import history_strategies  # noqa: F401,E402  (registers greso, cures, speed_bayes)
from . import seq_screen  # noqa: F401,E402  (registers speed_seq)

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
