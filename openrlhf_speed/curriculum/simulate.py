"""A simulated policy and driver for the scheduler: tests and the benchmark use them.

`SimulatedPolicy`: prompt i has a true pass rate p_i; each response is correct with
probability p_i (reward 1.0, else 0.0) and has a random token count. A `rate_fn` makes the
pass rate drift: p = rate_fn(prompt, epoch, policy_version), e.g. a prompt the policy
learns to solve after some epochs (history-based strategies must notice it). The randomness of a
request depends only on (seed, request_id), never on call order, so a run resumed from a
checkpoint sees exactly the responses an uninterrupted run saw.

`run_serial`: plays the CPU driver's serial schedule instead (`--speed.schedule serial`): a
step collects until a batch pops, then drains everything in flight before the weight sync.

`SimulatedDriver`: plays the rollout driver. Each tick it fetches new requests, completes
up to `completions_per_tick` outstanding ones in a scrambled but deterministic order (so
continuations overtake screenings, as with real engines), pops a batch if one is ready and
then bumps the policy version (a training step plus weight sync). Its only state is the set
of outstanding requests, which a restored scheduler hands out again.

Not in the paper; the paper evaluates with real models only.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import numpy as np

from .config import SpeedConfig
from .records import Batch, Request, Response
from .scheduler import Scheduler


class SimulatedPolicy:
    """Bernoulli(p_i) rewards, token counts uniform in [min_tokens, max_tokens].

    payload of response j of a request: (prompt_index, request_id, phase, j), so tests can
    check where every trained sample came from.
    """

    def __init__(self, pass_rates: Sequence[float], seed: int = 0,
                 min_tokens: int = 16, max_tokens: int = 256,
                 rate_fn: Optional[Callable[[int, int, int], float]] = None) -> None:
        self.pass_rates = np.asarray(pass_rates, dtype=np.float64)  # [num_prompts]
        self.seed = seed
        self.min_tokens, self.max_tokens = min_tokens, max_tokens
        self.rate_fn = rate_fn

    def rate(self, prompt_index: int, epoch: int, policy_version: int) -> float:
        if self.rate_fn is None:
            return float(self.pass_rates[prompt_index])
        return float(self.rate_fn(prompt_index, epoch, policy_version))

    def respond(self, request: Request, policy_version: int) -> list:
        rng = np.random.default_rng([self.seed, request.request_id])
        p = self.rate(request.prompt_index, request.epoch, policy_version)
        correct = rng.random(request.n) < p  # [n]
        tokens = rng.integers(self.min_tokens, self.max_tokens + 1, size=request.n)  # [n]
        return [
            Response(float(c), int(t), policy_version,
                     (request.prompt_index, request.request_id, request.phase, j))
            for j, (c, t) in enumerate(zip(correct, tokens))
        ]


def _completion_key(request_id: int) -> int:
    # A fixed scramble of ids (Knuth's multiplicative hash): out of order, yet stateless.
    return (request_id * 2654435761) % (1 << 32)


class SimulatedDriver:
    """Drives a Scheduler with a SimulatedPolicy (see the module docstring).

    completions_per_tick: requests completed per tick; None completes all outstanding.
    num_engines: engine ids reported to submit are request_id % num_engines.
    observer: called as observer(event, scheduler, payload) after every scheduler call,
        event in {"requests", "submit", "batch"}; tests check invariants there.
    """

    def __init__(self, scheduler: Scheduler, policy: SimulatedPolicy,
                 completions_per_tick: Optional[int] = None, num_engines: int = 2,
                 observer: Optional[Callable] = None) -> None:
        self.scheduler, self.policy = scheduler, policy
        self.completions_per_tick = completions_per_tick
        self.num_engines = num_engines
        self.observer = observer or (lambda event, sched, payload: None)
        self.pending: dict[int, Request] = {}
        self.requests: list[Request] = []  # every request handed out, in order

    def tick(self) -> Optional[Batch]:
        sched = self.scheduler
        new = sched.next_requests()
        self.observer("requests", sched, new)
        self.requests.extend(new)
        self.pending.update((r.request_id, r) for r in new)
        order = sorted(self.pending, key=_completion_key)
        for rid in order[: self.completions_per_tick]:
            req = self.pending.pop(rid)
            sched.submit(rid, self.policy.respond(req, sched.policy_version), engine=rid % self.num_engines)
            self.observer("submit", sched, req)
        batch = sched.pop_batch()
        if batch is not None:
            self.observer("batch", sched, batch)
            sched.policy_version += 1
        return batch

    def run(self, max_steps: Optional[int] = None, max_ticks: int = 10_000_000) -> list:
        """Tick until `max_steps` batches, or until the scheduler is exhausted."""
        batches = []
        for _ in range(max_ticks):
            if max_steps is not None and len(batches) >= max_steps:
                return batches
            if self.scheduler.exhausted:
                return batches
            batch = self.tick()
            if batch is not None:
                batches.append(batch)
        raise RuntimeError(f"simulation made no end after {max_ticks} ticks")


@dataclasses.dataclass
class SimulationResult:
    batches: list
    requests: list
    scheduler: Scheduler
    driver: SimulatedDriver


def run_simulation(pass_rates: Sequence[float], config: SpeedConfig, *, seed: int = 0,
                   completions_per_tick: Optional[int] = None, max_steps: Optional[int] = None,
                   min_tokens: int = 16, max_tokens: int = 256,
                   observer: Optional[Callable] = None,
                   rate_fn: Optional[Callable[[int, int, int], float]] = None) -> SimulationResult:
    """Run a scheduler over len(pass_rates) simulated prompts; see SimulatedDriver."""
    sched = Scheduler(num_prompts=len(pass_rates), config=config)
    policy = SimulatedPolicy(pass_rates, seed=seed, min_tokens=min_tokens, max_tokens=max_tokens,
                             rate_fn=rate_fn)
    driver = SimulatedDriver(sched, policy, completions_per_tick, observer=observer)
    batches = driver.run(max_steps=max_steps)
    return SimulationResult(batches, driver.requests, sched, driver)


def run_serial(pass_rates: Sequence[float], config: SpeedConfig, steps: int, *, seed: int = 0,
               completions_per_tick: int = 8, tags=None) -> SimulationResult:
    """`steps` batches the way the serial schedule makes them (rollout/speed_generator.py):
    each tick starts what the scheduler allows and completes `completions_per_tick` requests in
    a scrambled order until a batch pops; then the drain completes every request in flight (the
    continuations it makes wait for the next step), and the policy version moves on. A step whose
    batch comes from groups in hand thus still starts, and finishes, a generation batch. tags:
    the prompts' --speed.prior_key values, for the strategies that read them."""
    sched = Scheduler(num_prompts=len(pass_rates), config=config, tags=tags)
    policy = SimulatedPolicy(pass_rates, seed=seed)
    driver = SimulatedDriver(sched, policy, completions_per_tick)
    batches = []
    while len(batches) < steps and not sched.exhausted:
        batch = sched.pop_batch()
        if batch is None:
            new = sched.next_requests()
            driver.requests.extend(new)
            driver.pending.update((r.request_id, r) for r in new)
            _complete(driver, sorted(driver.pending, key=_completion_key)[:completions_per_tick])
            continue
        batches.append(batch)
        _complete(driver, sorted(driver.pending, key=_completion_key))  # the drain
        sched.policy_version += 1
    return SimulationResult(batches, driver.requests, sched, driver)


def _complete(driver: SimulatedDriver, request_ids: list) -> None:
    for rid in request_ids:
        req = driver.pending.pop(rid)
        driver.scheduler.submit(rid, driver.policy.respond(req, driver.scheduler.policy_version))
