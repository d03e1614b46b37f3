"""The SPEED samples generator: drives OpenRLHF's vLLM engines with the curriculum
scheduler's requests and hands OpenRLHF's trainer exactly B groups of N Experiences.

Legend: B prompts per training batch (`--rollout.batch_size`), N responses per prompt
(`--rollout.n_samples_per_prompt`), N_init screening responses (`--speed.n_init`).

It replaces OpenRLHF's `SamplesGenerator` behind the same `generate_samples()` call and
reuses its conversion of an engine response into an `Experience`. A prompt's continuation
goes out as soon as its own screening is scored, to the engine that screened it, while the
next prompts' screenings are in flight: the paper's pre-fetching, per prompt rather than per
batched call. The rewards come from OpenRLHF's own reward path inside the engine actors, so
scoring overlaps generation.

Rules not to break:
- `drain()` stops the feeding thread and collects every request in flight before the weight
  sync, so no response mixes tokens of two policies; each response records the policy
  version that generated it.
- A response whose reward could not be computed never reaches the scheduler: it is counted
  (`reward/errors`) and regenerated on the same engine (rewards/guard.py decides when to stop).
- A prompt over the prompt limit is never sent: skipped at start-up and counted
  (`speed/prompts_too_long`), as the dry run counts it (cli/preflight.py).
- A failed engine stops the run with EngineDiedError naming the checkpoint a rerun resumes
  from; its requests are not moved to another engine.
- `timing_parts/curriculum_overhead` is this driver's own code only: everything but waiting
  for engines and the Experience conversion, which the plain generator does too.

The driver in full (engine choice, feeding during training, `--speed.schedule serial`,
staleness and the importance-sampling correction, the trace's events):
docs/design.md#the-driver-and-the-engines; its metrics (`driver/*`, `timing_parts/*`):
docs/design.md#metrics.
"""

import math
import threading
import time
from typing import Dict, List, Optional

import ray
import torch
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from tqdm import tqdm
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind

from openrlhf_speed.curriculum import Response, Scheduler, SpeedConfig
from openrlhf_speed.data import check_cache
from openrlhf_speed.data.loader import prompt_limit, token_counts
from openrlhf_speed.rewards.guard import DEFAULT_MAX_ERROR_RATE, DEFAULT_RETRIES, RewardGuard, invalid_reason
from openrlhf_speed.rollout.checkpoint import resume_hint
from openrlhf_speed.rollout.trace import TraceFile


# Per-window counters of _collect, reported as these metrics (see the module docstring).
COUNTS = {"tokens": "driver/tokens_returned", "responses": "driver/responses_returned",
          "convert_s": "timing_parts/convert", "wait_s": "driver/wait_s", "outstanding_s": None,
          "fed_responses": "driver/responses_fed", "fed_s": "driver/feed_s"}
# How often the feeding thread looks for a stop while it waits on the engines (seconds).
_FEED_POLL_S = 0.05
# The batch progress bar's least interval between redraws (seconds). In a log file every
# redraw is a line: at one per collected request, thousands per step at 7B scale.
_BAR_INTERVAL_S = 5.0


class EngineDiedError(RuntimeError):
    """A vLLM engine failed mid-generation: the run stops (cli/train.py prints it as one line)."""


def _sampling_fields(params: SamplingParams, max_length: int) -> dict:
    """The trace's copy of a request's sampling parameters (plain JSON)."""
    return {"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k, "min_tokens": params.min_tokens, "logprobs": params.logprobs,
            "skip_special_tokens": params.skip_special_tokens, "max_length": max_length}


def _state_summary(sched: dict) -> dict:
    """The trace's view of a scheduler state ("save" / "restore" events): a resumed run's
    restore must equal the save of the checkpoint it read (tests/e2e kill tests compare them)."""
    return {"buffer": [s["prompt_index"] for s in sched["ready"]],
            "inflight": [s["prompt_index"] for s in sched["inflight"]],
            "step": sched["step"], "epoch": sched["epoch"], "position": sched["position"],
            "next_request_id": sched["next_request_id"], "totals": {k: float(v) for k, v in sched["totals"].items()}}


def drop_too_long(prompts: List[str], labels: List[str], tokenizer, limit: int, args=None):
    """(prompts, labels, dropped row indices) without the prompts over `limit` tokens, counted as
    OpenRLHF's executor counts them before it would truncate one (the rendered text,
    no special tokens added). The scheduler's prompt indices are positions in what is kept.
    With the run's `args`, a rerun that resumes reuses the count of these very prompts
    (data/check_cache.py) instead of tokenizing all of them again."""
    # Hashed only where a record can be kept: a run without checkpoints would hash every prompt for nothing.
    key = check_cache.prompts_key(prompts, tokenizer, limit) if check_cache.saves_checkpoints(args) else None
    dropped = check_cache.reused_too_long(args, key) if key else None
    if dropped is None:
        dropped = [i for i, n in enumerate(token_counts(prompts, tokenizer)) if n > limit]
        if key:
            check_cache.save_too_long(args, key, dropped)
    if not dropped:
        return list(prompts), list(labels), []
    skip = set(dropped)
    keep = [i for i in range(len(prompts)) if i not in skip]
    return [prompts[i] for i in keep], [labels[i] for i in keep], dropped


class SpeedSamplesGenerator(SamplesGenerator):
    prompts_too_long = 0  # prompts of the dataset over the prompt limit, skipped (drop_too_long)
    _feeder: Optional[threading.Thread] = None  # the feeding thread while it runs (start_feeding)
    _feed_stop: Optional[threading.Event] = None
    _feed_error: Optional[BaseException] = None
    _fed_before = 0.0  # driver/responses_fed's count when the thread started
    _finished = False  # the curriculum's end was reported

    def __init__(self, strategy, prompts_dataloader, eval_dataloader, tokenizer, vllm_engines, config: SpeedConfig,
                 trace_path: Optional[str] = None, max_steps: Optional[int] = None):
        super().__init__(strategy, prompts_dataloader, eval_dataloader, tokenizer, vllm_engines)
        dataset = prompts_dataloader.dataset  # OpenRLHF's PromptDataset: rendered prompts, labels
        limit, why = prompt_limit(self.args.data.max_len, self.args.rollout.max_new_tokens)
        self.prompts, self.labels, too_long = drop_too_long(dataset.prompts, dataset.labels, tokenizer, limit,
                                                            self.args)
        self.prompts_too_long = len(too_long)
        if too_long:
            print(f"[openrlhf-speed] {len(too_long)} of {len(dataset.prompts)} prompts are longer than {limit} "
                  f"tokens (the prompt limit, {why}; dataset rows {too_long[:5]}): skipped, never sent, counted as "
                  "speed/prompts_too_long", flush=True)
        if not self.prompts:
            raise ValueError(f"every prompt of --data.prompt_dataset is longer than {limit} tokens (the prompt "
                             f"limit, {why}): raise --data.max_len or shorten the prompts")
        tags = None
        if config.prior_key:  # speed_seq's per-tag prior (rollout/tags.py)
            from openrlhf_speed.rollout.tags import prompt_tags

            tags = prompt_tags(self.args, strategy, config.prior_key, len(dataset.prompts), too_long)
        self.scheduler = Scheduler(num_prompts=len(self.prompts), config=config, tags=tags)
        self.policy_version = 0
        # ray ref -> (Request, engine index, policy version, valid Responses kept, regeneration round)
        self._pending: Dict = {}
        speed_args = getattr(self.args, "speed", None)
        self.reward_guard = RewardGuard(
            max_error_rate=getattr(speed_args, "reward_max_error_rate", DEFAULT_MAX_ERROR_RATE),
            retries=getattr(speed_args, "reward_retries", DEFAULT_RETRIES),
        )
        self._engine_load = [0] * len(self.vllm_engines)  # responses outstanding per engine
        max_mb = getattr(speed_args, "trace_max_mb", 0) or 0
        self._trace = TraceFile(trace_path, int(max_mb * 2**20)) if trace_path else None
        self.last_metrics: dict = {}
        self._kwargs: dict = {}  # generate kwargs of the current step, for drain()
        self.max_steps = max_steps  # --train.max_steps: the run ends after this many batches
        self.overhead_s = 0.0  # driver time since the last batch, see the module docstring
        self._counts = dict.fromkeys(COUNTS, 0.0)  # the driver/* figures since the last batch
        # Sent once: each request would carry it otherwise (rollout/engine.py, set_tokenizer).
        ray.get([engine.set_tokenizer.remote(self.tokenizer) for engine in self.vllm_engines])
        if self._trace is not None:
            self._log_config()

    # -- the OpenRLHF seam -------------------------------------------------------------
    @torch.no_grad()
    def generate_samples(self, **generate_kwargs):
        """(B*N Experiences in contiguous groups, None, groups handed out, exhausted)."""
        t0 = time.time()
        self.stop_feeding()  # normally stopped by the drain already; never fill beside the thread
        self.scheduler.policy_version = self.policy_version
        batch = None if self.step_limit_reached() else self._fill_batch(generate_kwargs)
        if batch is None:
            if self._finished:  # OpenRLHF asks once more per remaining --train.num_episodes
                return [], None, 0, True
            self._finished = True
            totals = self.scheduler.totals()
            print(
                f"[openrlhf-speed] curriculum finished: {totals.get('prompts_started', 0):.0f} prompts started, "
                f"{totals.get('prompts_consumed', 0):.0f} trained, {totals.get('groups_dropped_at_end', 0):.0f} ready "
                f"groups dropped at the end (fewer than --rollout.batch_size); totals {totals}",
                flush=True,
            )
            if self.scheduler.starvation_warning:  # the last window never formed a batch
                print(f"[openrlhf-speed] WARNING {self.scheduler.starvation_warning}", flush=True)
            self._log("finished", totals=totals)
            return [], None, 0, True
        collect_s = self._collect_before_step(generate_kwargs)
        samples = [r.payload for g in batch.groups for r in g.responses]  # [B*N], group-major
        self.last_metrics = dict(batch.metrics)
        self.last_metrics["driver/collect_before_step_s"] = collect_s
        self.last_metrics["speed/prompts_too_long"] = float(self.prompts_too_long)
        self.last_metrics["timing_parts/curriculum_wait"] = time.time() - t0
        self.last_metrics["timing_parts/curriculum_overhead"] = self.overhead_s
        self.last_metrics.update(self.reward_guard.pop_metrics())
        self.last_metrics.update(self.pop_counts())
        self.overhead_s = 0.0
        if batch.starvation_warning:
            print(f"[openrlhf-speed] WARNING {batch.starvation_warning}", flush=True)
        self._log("batch", step=batch.step, prompts=[[g.prompt_index, g.epoch] for g in batch.groups],
                  rewards=[g.rewards.tolist() for g in batch.groups])
        return samples, None, len(batch.groups), self.scheduler.exhausted or self.step_limit_reached()

    def _collect_before_step(self, kwargs) -> float:
        """`--speed.schedule serial`: collect the requests still in flight now that the batch is
        complete, so the engines idle during the step's experience making and training (seconds
        waited; 0 with overlap; cli/flags.py has resolved auto to one of the two). On 2 shared
        CPU cores the overlap slowed the actor's forward passes 3.8x and cost more than it hid
        (docs/benchmarks.md, the 2-core profile). What is collected is buffered, as at the
        drain, and trains one policy version later."""
        speed_args = getattr(self.args, "speed", None)
        if getattr(speed_args, "schedule", "overlap") != "serial":
            return 0.0
        t0 = time.time()
        while self._pending:
            self._collect(kwargs)
        return time.time() - t0

    def step_limit_reached(self) -> bool:
        # The scheduler's step counter is part of its state, so the limit holds across resumes.
        return self.max_steps is not None and self.scheduler.totals().get("steps", 0) >= self.max_steps

    def start_feeding(self) -> None:
        """Keep the engines fed while the actor trains (`--speed.feed_during_training`): a
        thread dispatches what the scheduler asks for and collects what the engines return,
        as a step's fill does, until `stop_feeding` (drain() and generate_samples() call it);
        it starts new prompts only while fewer than B groups are complete or being completed.
        Nothing else may touch the scheduler or the requests meanwhile; the trainer only
        trains, over other actors. Its work counts as `driver/responses_fed` and its own
        code as `driver/feed_s`, not as the step's wait or overhead: it is off the critical path."""
        if self._feeder is not None or not self._kwargs or self.step_limit_reached():
            return  # running already, no step yet, or the last step: nothing more would train
        self._feed_stop = threading.Event()
        self._fed_before = self._counts["fed_responses"]
        self._feeder = threading.Thread(target=self._feed, args=(self._kwargs,), name="speed-feeder", daemon=True)
        self._feeder.start()

    def stop_feeding(self) -> None:
        """Stop the feeding thread and wait for it; an error it hit (an engine died, the reward
        guard stopped the run) is raised here, in the trainer's thread."""
        if self._feeder is None:
            return
        self._feed_stop.set()
        self._feeder.join()
        self._feeder = None
        # What the thread collected, for a reader of the trace: how much overlapped training
        # depends on timing (zero when no request finished while the actor trained).
        self._log("fed", responses=self._counts["fed_responses"] - self._fed_before, in_flight=len(self._pending))
        error, self._feed_error = self._feed_error, None
        if error is not None:
            raise error

    def _feed(self, kwargs) -> None:
        try:
            while not self._feed_stop.is_set():
                t0 = time.perf_counter()
                # New prompts only until the next batch is on its way: the feeding would otherwise
                # fill the whole buffer with groups screened now, which train one or more syncs later
                # (measured, proving benchmark: trained screenings 2.0 versions old from step 4 on).
                start_new = self.scheduler.groups_coming < self.scheduler.config.batch_prompts
                for request in self.scheduler.next_requests(start_new=start_new):
                    self._dispatch(request, kwargs)
                self._counts["fed_s"] += time.perf_counter() - t0
                if not self._pending:  # nothing in flight, and nothing may start
                    self._feed_stop.wait(_FEED_POLL_S)
                    continue
                self._collect(kwargs, timeout=_FEED_POLL_S, background=True)
        except BaseException as e:  # noqa: BLE001 -- handed to the trainer's thread by stop_feeding
            self._feed_error = e

    def drain(self) -> float:
        """Collect every request in flight (before a weight sync); returns seconds waited."""
        t0 = time.time()
        self.stop_feeding()
        while self._pending:
            self._collect(self._kwargs)
        self._log("drained", seconds=time.time() - t0)  # the weight sync (or the run's end) follows
        return time.time() - t0

    def pop_counts(self) -> dict:
        """The driver/* metrics since the last call (see COUNTS), and reset them."""
        c, self._counts = self._counts, dict.fromkeys(COUNTS, 0.0)
        out = {key: c[name] for name, key in COUNTS.items() if key}
        out["driver/outstanding_mean"] = c["outstanding_s"] / c["wait_s"] if c["wait_s"] else float("nan")
        return out

    # -- driving the scheduler ---------------------------------------------------------
    def _fill_batch(self, kwargs):
        self._kwargs = kwargs
        bar = tqdm(total=self.scheduler.config.batch_prompts, desc="SPEED batch (groups ready)", leave=False,
                   mininterval=_BAR_INTERVAL_S)
        while True:
            t0 = time.perf_counter()
            bar.set_postfix(inflight=self.scheduler.inflight_prompts, refresh=False)
            bar.update(min(self.scheduler.buffer_len, bar.total) - bar.n)  # redraws at most every _BAR_INTERVAL_S
            batch = self.scheduler.pop_batch()
            if batch is not None or self.scheduler.exhausted:
                bar.close()
                self.overhead_s += time.perf_counter() - t0
                return batch
            for request in self.scheduler.next_requests():
                self._dispatch(request, kwargs)
            for warning in self.scheduler.take_warnings():  # before any batch forms
                print(f"[openrlhf-speed] WARNING {warning}", flush=True)
            self.overhead_s += time.perf_counter() - t0
            if not self._pending:
                raise RuntimeError(
                    "the SPEED scheduler has no batch, no work in flight and is not exhausted; this is a bug "
                    f"(totals: {self.scheduler.totals()})"
                )
            self._collect(kwargs)

    def _sampling_params(self, kwargs) -> SamplingParams:
        # Same fields as OpenRLHF's own dispatch, so both generators sample alike.
        return SamplingParams(
            temperature=kwargs.get("temperature", 1.0),
            top_p=kwargs.get("top_p", 1.0),
            top_k=kwargs.get("top_k", -1),
            max_tokens=kwargs.get("max_new_tokens"),
            min_tokens=kwargs.get("min_new_tokens", 1),
            skip_special_tokens=kwargs.get("skip_special_tokens", False),
            logprobs=1 if self.args.algo.advantage.is_correction_level != "off" else None,
            # The engine actor keeps only the final output; vLLM's default (CUMULATIVE) builds
            # a RequestOutput and wakes the actor's task at every token of every response.
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def _dispatch(self, request, kwargs, engine=None, n=None, kept=(), attempt=0) -> None:
        """Send `request` (or, for a regeneration, `n` of its responses with `kept` the valid
        ones so far) to an engine."""
        n = request.n if n is None else n
        if engine is None and request.engine_hint is not None:
            engine = request.engine_hint
        elif engine is None:
            engine = min(range(len(self.vllm_engines)), key=lambda i: (self._engine_load[i], i))
        params, max_length = self._sampling_params(kwargs), kwargs.get("max_len", 2048)
        ref = self.vllm_engines[engine].generate_responses.remote(
            prompt=self.prompts[request.prompt_index],
            label=self.labels[request.prompt_index],
            sampling_params=params,
            max_length=max_length,
            num_samples=n,  # no hf_tokenizer: the engine holds it (set_tokenizer above)
        )
        self._pending[ref] = (request, engine, self.policy_version, list(kept), attempt)
        self._engine_load[engine] += n
        if self._trace is None:
            return
        # The prompt's text once per trace file, before its first request there.
        text = self._record("prompt", prompt=request.prompt_index, text=self.prompts[request.prompt_index])
        fields = dict(prompt=request.prompt_index, phase=request.phase, n=n, engine=engine,
                      sampling=_sampling_fields(params, max_length))
        if attempt:
            event = self._record("regenerate", attempt=attempt, **fields)
        else:  # "start" stays one per screening (older readers count them); a continuation is its own event
            event = self._record("continue" if request.phase == "continue" else "start", epoch=request.epoch, **fields)
        self._trace.write(event, once=(request.prompt_index, text))

    def _collect(self, kwargs, timeout: Optional[float] = None, background: bool = False) -> None:
        """Wait for at least one request (at most `timeout` seconds), then take every other one
        that is done too. `background`: the feeding thread's call, off the step's clock."""
        outstanding, t_wait = sum(self._engine_load), time.perf_counter()
        ready, rest = ray.wait(list(self._pending), num_returns=1, timeout=timeout)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        waited = time.perf_counter() - t_wait
        t_own = time.perf_counter()
        for ref in ready:  # none when `timeout` passed first
            request, engine, version, kept, attempt = self._pending.pop(ref)
            try:
                outputs = ray.get(ref)  # done already: ray.wait returned it
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
                raise self._engine_died(engine, request, e) from e
            self._engine_load[engine] -= len(outputs)
            t0 = time.perf_counter()
            experiences = [self._process_response_into_experience(o, **kwargs) for o in outputs]
            t1 = time.perf_counter()
            self._counts["tokens"] += sum(int(e.response_length[0]) for e in experiences)
            self._counts["responses"] += len(experiences)
            self._take_scored(request, engine, version, kept, attempt, experiences, kwargs)
            if background:
                self._counts["fed_responses"] += len(experiences)
            else:
                self._counts["convert_s"] += t1 - t0
                self.overhead_s += time.perf_counter() - t1
        if background:  # conversion included: all of it overlaps training
            self._counts["fed_s"] += time.perf_counter() - t_own
            return
        self._counts["wait_s"] += waited
        self._counts["outstanding_s"] += outstanding * waited

    def _engine_died(self, engine: int, request, error: Exception) -> EngineDiedError:
        """The error that stops the run when an engine fails (vLLM's EngineDeadError when its
        EngineCore process dies, or the Ray actor itself died): which engine, by index and by
        the Ray actor id its start-up line printed, what it raised, and where a rerun resumes."""
        actor_id = getattr(self.vllm_engines[engine], "_actor_id", None)
        actor = actor_id.hex()[:8] if actor_id is not None else "?"
        cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else error
        # EngineDeadError comes back from Ray's pickling with its message twice in `args`
        # (its __init__ prepends it again), which str() would print as a tuple.
        text = cause.args[0] if len(cause.args) > 1 and isinstance(cause.args[0], str) else str(cause)
        first_line = (text.strip().splitlines() or [""])[0]
        return EngineDiedError(
            f"vLLM engine {engine} (Ray actor {actor}) failed while generating {request.n} responses for prompt "
            f"{request.prompt_index} ({request.phase}): {type(cause).__name__}: {first_line} The run stops; see "
            f"the engine's log above for the cause. {resume_hint(self.args.ckpt.path, self.args.ckpt.load_enable)}"
        )

    def _take_scored(self, request, engine, version, kept, attempt, experiences, kwargs) -> None:
        """Valid responses join `kept`; invalid ones are counted and regenerated (see
        rewards/guard.py). The scheduler sees the request once all N are valid."""
        responses = [self._to_response(e, version) for e in experiences]
        reasons = [invalid_reason(e.rewards, e.info) for e in experiences]
        self._log("scored", prompt=request.prompt_index, phase=request.phase, rewards=[r.reward for r in responses],
                  invalid=[r for r in reasons if r is not None])
        self.reward_guard.observe(reasons, [e.info for e in experiences])
        self.reward_guard.check(request.prompt_index, attempt, reasons, self.labels[request.prompt_index])
        kept = kept + [r for r, why in zip(responses, reasons) if why is None]
        missing = request.n - len(kept)
        if missing > 0:
            self.reward_guard.count_regenerated(missing)
            self._dispatch(request, kwargs, engine=engine, n=missing, kept=kept, attempt=attempt + 1)
            return
        self.scheduler.submit(request.request_id, kept, engine=engine)

    @staticmethod
    def _to_response(experience, version: int) -> Response:
        # rewards None: the reward function raised (OpenRLHF logged it at info level). NaN
        # marks it here for the trace; such a response is regenerated, never submitted.
        return Response(
            reward=math.nan if experience.rewards is None else float(experience.rewards[0]),
            num_tokens=int(experience.response_length[0]),
            policy_version=version,
            payload=experience,
        )

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        if self._pending or self._feeder is not None:
            raise RuntimeError("state_dict() with requests in flight: call drain() first")
        return {"scheduler": self.scheduler.state_dict(), "policy_version": self.policy_version,
                "reward_guard": self.reward_guard.state_dict()}

    def log_saved(self, global_step: int, state: dict) -> None:
        self._log("save", global_step=global_step, **_state_summary(state["scheduler"]))

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self.policy_version = state["policy_version"]
        self.reward_guard.load_state_dict(state.get("reward_guard", {}))  # absent in older checkpoints
        self._log("restore", **_state_summary(state["scheduler"]))

    def _log_config(self) -> None:
        """What a replay needs to build the same engine (bench/driver.py, cli/replay.py)."""
        a = self.args
        settings = ray.get(self.vllm_engines[0].engine_settings.remote())  # dtype, scheduler limits, caching
        self._log("config", header=True, model=a.actor.model_name_or_path, num_engines=len(self.vllm_engines),
                  seed=a.train.seed, max_model_len=a.data.max_len, enforce_eager=a.vllm.enforce_eager,
                  gpu_memory_utilization=a.vllm.gpu_memory_utilization,
                  logprobs_mode="processed_logprobs" if a.algo.advantage.is_correction_level != "off" else None,
                  **settings)

    def _record(self, event: str, **fields) -> dict:
        return {"event": event, "policy_version": self.policy_version, **fields}

    def _log(self, event: str, header: bool = False, **fields) -> None:
        if self._trace is not None:
            self._trace.write(self._record(event, **fields), header=header)
