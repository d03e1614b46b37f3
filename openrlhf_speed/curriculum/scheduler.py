"""The SPEED scheduler: screening, qualification, continuation, buffer, batches, state.

A plain object driven by a rollout driver that owns the inference engines:

    next_requests()  new work: continuations of prompts whose screening was just scored,
                     then screenings of new prompts while capacity allows (pre-fetching)
    submit(id, responses, engine=None)   scored responses of one request
    pop_batch()      exactly B complete groups of N, or None

Rules not to break (the driver and the README rely on them):
- every prompt of an epoch is started exactly once, or skipped by a strategy and counted;
- every batch is exactly B complete groups of N, the first B ready (FIFO); the groups left
  at the end of the run are dropped and counted, never padded;
- ready groups plus prompts in flight never exceed `buffer_size`, so nothing is generated
  and then discarded;
- starvation warns with the screening histogram (with `max_screened_per_batch`, stops
  naming the flags), never silently;
- with `max_staleness`, a group whose screening is older than that many policy versions
  never trains (its prompt is screened again); with `pace_batches` P, new prompts start
  only while fewer than P batches of groups are expected from the work ahead;
- `state_dict()` holds everything, outstanding requests included: a resumed run issues the
  same requests and batches as an uninterrupted one.

Each policy in full (epoch order, the in-flight and buffer bounds, starvation, end of run,
staleness, history, state) and the departures from the paper:
docs/design.md#the-schedulers-policies.
"""

from __future__ import annotations

import collections
import dataclasses
import warnings
from typing import Any, Optional

import numpy as np

from .config import FLAGS, RESUMABLE_CHANGES, SpeedConfig
from .metrics import (Window, batch_metrics, starvation_due, starvation_error_message,
                      starvation_warning, useful_tokens)
from .records import (PHASE_CONTINUE, PHASE_FULL, PHASE_SCREEN, STATUS_CONTINUING, STATUS_FULL, STATUS_OF_PHASE,
                      STATUS_READY, STATUS_REJECTED, Batch, PromptState, Request, StarvationError, StarvationWarning)
from .history import PromptHistory
from .staleness import REASON_STALE, screening_age, stale_reason, staleness_histogram
from .strategies import ACCEPT, REJECT, REQUEST, SKIP, STRATEGIES, Decision

# 2: the history became per-prompt arrays; the epoch order and the strategy's state are
# saved. Format 1 checkpoints still load (their history records are replayed).
STATE_FORMAT = 2

# Per screening, the weight left on older ones in the recent qualification rate that paces
# the starts: a memory of about 64 screenings, one generation batch of the benchmarks, in
# which the rate drifts little (0.27-0.58 over a whole low-mix run).
PACE_DECAY = 1.0 - 1.0 / 64
# Its prior, [qualified, screened]: one qualified screening, so a run starts cautious (q = 1).
PACE_PRIOR = (1.0, 1.0)


class Scheduler:
    def __init__(self, num_prompts: int, config: SpeedConfig, tags=None) -> None:
        if num_prompts < 1:
            raise ValueError(f"the prompt dataset is empty (num_prompts={num_prompts})")
        self.config = config.validate()
        self.num_prompts = num_prompts
        self.strategy = STRATEGIES[config.strategy](config)
        if tags is not None and len(tags) != num_prompts:
            raise ValueError(f"{len(tags)} prompt tags for {num_prompts} prompts")
        self.strategy.bind_tags(tags)  # [P] ints from the data (--speed.prior_key), or None
        self.history = PromptHistory(num_prompts, decay=self.strategy.history_decay(config))
        self.policy_version = 0
        self._epoch = 0  # epoch of the next prompt to start
        self._position = 0  # index into _order of the next prompt
        self._order = self._make_order(0)  # [num_prompts]
        self._next_id = 0
        self._inflight: dict[int, PromptState] = {}  # request_id -> prompt awaiting it
        self._outbox: list[Request] = []  # issued but not yet handed to the driver
        self._ready: list[PromptState] = []  # complete groups, completion order
        self._step = 0
        self._window = Window()
        self._totals: collections.Counter = collections.Counter()
        self._warnings: list[str] = []  # starvation warnings not yet taken by the driver
        # Recent qualification for pacing: [qualified, screened], each decayed by PACE_DECAY a screening.
        self._pace = list(PACE_PRIOR)

    # ---- driver API -------------------------------------------------------------------

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The order in which epoch `epoch` starts prompts. [num_prompts] of indices."""
        return np.random.default_rng([self.config.seed, epoch]).permutation(self.num_prompts)

    def next_requests(self, start_new: bool = True) -> list[Request]:
        """New work since the last call: continuations first, then new prompts (none when
        `start_new` is False: the driver's feeding thread, once a batch is on its way)."""
        self._check_hard_limit()
        self._expire_stale()
        out, self._outbox = self._outbox, []
        while start_new and self._can_start():
            nxt = self._next_prompt()
            if nxt is None:
                break
            epoch, index = nxt
            self.history.epoch, self.history.phase = epoch, None
            decision = self.strategy.start(index, self.history)
            if decision.verdict == SKIP or decision.reason in self.strategy.reasons:
                self._count_reason(decision.reason)
            if decision.verdict == SKIP:
                self._window.skipped += 1
                self._totals["prompts_skipped"] += 1
                continue
            if decision.verdict != REQUEST:
                raise RuntimeError(f"strategy {self.config.strategy!r} start() returned {decision}")
            state = PromptState(index, epoch, STATUS_OF_PHASE[decision.phase], n_screen=decision.n)
            out.append(self._issue(state, decision))
            self._totals["prompts_started"] += 1
        return out

    def submit(self, request_id: int, responses: list, engine: Any = None) -> None:
        """Scored responses of one request (len == request.n). `engine`: any picklable
        hint (e.g. the engine index) echoed as the continuation's `engine_hint`."""
        state = self._inflight.get(request_id)
        if state is None:
            raise ValueError(f"request {request_id} is not outstanding (unknown or already submitted)")
        req = state.request
        if len(responses) != req.n:
            raise ValueError(f"request {request_id} asked for {req.n} responses, got {len(responses)}")
        del self._inflight[request_id]
        state.request = None
        state.responses.extend(responses)
        if engine is not None:
            state.engine = engine
        rewards = np.array([r.reward for r in responses], dtype=np.float64)  # [req.n]
        threshold = self.config.correct_threshold
        self.history.record(state.prompt_index, state.epoch, int(np.sum(rewards >= threshold)), req.n)
        tokens = sum(r.num_tokens for r in responses)
        self._window.tokens[req.phase] += tokens
        self._totals[f"tokens_{req.phase}"] += tokens
        self._totals["tokens_generated"] += tokens

        all_rewards = np.array([r.reward for r in state.responses], dtype=np.float64)  # [so far]
        self.history.epoch, self.history.phase = state.epoch, req.phase
        self.history.groups_coming = self.groups_coming
        decision = self.strategy.after_scored(state.prompt_index, all_rewards, self.history)
        if decision.verdict in (ACCEPT, REJECT):
            self.history.finish(state.prompt_index, int(np.sum(all_rewards >= threshold)), len(all_rewards))
        self._count_reason(decision.reason)
        # A screening is counted once, at the look that decides it: the first for every strategy
        # but speed_seq, whose all-equal first half may ask for the rest (REQUEST in PHASE_SCREEN).
        more = decision.verdict == REQUEST and decision.phase == PHASE_SCREEN
        if req.phase != PHASE_CONTINUE and not more:
            self._count_screening(all_rewards, passed=decision.verdict != REJECT)
        self._apply(state, decision)

    def pop_batch(self) -> Optional[Batch]:
        """Exactly B complete groups (B*N samples) with the window's metrics, or None."""
        cfg = self.config
        self._expire_stale()
        if len(self._ready) < cfg.batch_prompts:
            self._check_hard_limit()
            return None
        states = self._ready[: cfg.batch_prompts]
        del self._ready[: cfg.batch_prompts]
        groups = [s.to_group() for s in states]
        # The strategy's own figures describe the window this batch closes: read before on_batch
        # starts the next (read after it, speed_seq's window shares were NaN in every batch).
        strategy_metrics = self.strategy.metrics()
        self.strategy.on_batch(self._epoch)
        self._totals["prompts_consumed"] += len(groups)
        self._totals["tokens_useful"] += useful_tokens(groups)
        metrics = batch_metrics(
            self._window, groups, cfg, screen_n=self.strategy.screen_n(cfg),
            reasons=self.strategy.reasons, totals=self._totals, policy_version=self.policy_version,
            qualifies=self.strategy.qualifies,
        )
        metrics.update({
            "speed/buffer_size": float(len(self._ready)),
            "speed/inflight_prompts": float(len(self._inflight)),
            "speed/epoch": float(self._epoch),
            "speed/epoch_position": float(self._position),
            "speed/step": float(self._step),
        })
        metrics.update({f"speed/{k}": float(v) for k, v in strategy_metrics.items()})
        if cfg.max_staleness is not None:  # unbounded ages would make the histogram's keys vary
            metrics.update(staleness_histogram(groups, self.policy_version, cfg.max_staleness))
            metrics["speed/prompts_rescreened_stale"] = float(self._window.stale_rescreened)
            metrics["speed/max_staleness"] = float(cfg.max_staleness)
        if cfg.pace_batches is not None:  # what the next step's starts are held to
            metrics["speed/pace_expected_groups"] = float(self.expected_groups)
            metrics["speed/pace_qualification"] = self.pace_qualification
        warning = starvation_warning(self._window, cfg)
        batch = Batch(self._step, groups, metrics, warning)
        self._step += 1
        self._window = Window()
        if warning:
            warnings.warn(warning, StarvationWarning, stacklevel=2)
        return batch

    @property
    def exhausted(self) -> bool:
        """All epochs started, nothing in flight, and fewer than B groups ready (those
        are dropped; see `totals()`)."""
        return (self._epoch >= self.config.num_epochs and not self._inflight
                and len(self._ready) < self.config.batch_prompts)

    @property
    def buffer_len(self) -> int:
        return len(self._ready)

    @property
    def groups_coming(self) -> int:
        """Complete groups plus prompts in flight that will complete one unless the engine
        fails (continuations, full requests); screenings in flight are not counted."""
        return len(self._ready) + sum(s.status in (STATUS_CONTINUING, STATUS_FULL) for s in self._inflight.values())

    @property
    def pace_qualification(self) -> float:
        """The recent share of first looks that qualified (decayed; see PACE_DECAY)."""
        return self._pace[0] / self._pace[1]

    @property
    def expected_groups(self) -> float:
        """Groups the work ahead should yield: complete groups and continuations count one
        each, a first request in flight (a screening, or DAPO's full group) the recent
        qualification rate."""
        q = self.pace_qualification
        return len(self._ready) + sum(1.0 if s.status == STATUS_CONTINUING else q for s in self._inflight.values())

    @property
    def inflight_prompts(self) -> int:
        return len(self._inflight)

    @property
    def starvation_warning(self) -> Optional[str]:
        """The warning the current window would carry, for drivers that log while waiting."""
        return starvation_warning(self._window, self.config)

    def take_warnings(self) -> list[str]:
        """Starvation warnings issued since the last call (also sent to `warnings.warn`),
        for drivers that print them while no batch forms."""
        out, self._warnings = self._warnings, []
        return out

    def totals(self) -> dict:
        """Run totals (prompts, tokens, reasons), including groups dropped at the end."""
        out = {k: float(v) for k, v in self._totals.items()}
        out["groups_dropped_at_end"] = float(len(self._ready) if self.exhausted else 0)
        out["epoch"] = float(self._epoch)
        out["steps"] = float(self._step)
        return out

    # ---- internals --------------------------------------------------------------------

    def _can_start(self) -> bool:
        inflight = len(self._inflight)
        if inflight >= self.config.inflight_limit or len(self._ready) + inflight >= self.config.buffer_limit:
            return False
        limit = self.config.max_inflight_responses
        if limit is not None and self.outstanding_responses >= limit:
            return False
        return self.config.pace_batches is None or self.expected_groups < self.pace_limit

    @property
    def pace_limit(self) -> int:
        """P x B: this batch's groups and the next P - 1 batches' (FIFO)."""
        return self.config.batch_prompts * (self.config.pace_batches or 0)

    @property
    def outstanding_responses(self) -> int:
        """Responses asked for by the requests in flight (issued, not yet submitted)."""
        return sum(s.request.n for s in self._inflight.values())

    def _next_prompt(self) -> Optional[tuple[int, int]]:
        """(epoch, prompt_index) of the next prompt to start, or None after the last epoch."""
        if self._epoch >= self.config.num_epochs:
            return None
        item = (self._epoch, int(self._order[self._position]))
        self._position += 1
        if self._position == self.num_prompts:
            self._epoch += 1
            self._position = 0
            self._order = self._make_order(self._epoch)
        return item

    def _make_order(self, epoch: int) -> np.ndarray:
        """The strategy's order for `epoch`, checked to be a permutation: a strategy may
        reorder an epoch, never drop or repeat a prompt in it."""
        self.history.epoch, self.history.phase = epoch, None
        order = np.asarray(self.strategy.order_epoch(epoch, self.epoch_order(epoch), self.history))
        if order.shape != (self.num_prompts,) or np.bincount(order, minlength=self.num_prompts).max() != 1:
            raise RuntimeError(f"strategy {self.config.strategy!r} order_epoch() did not return a "
                               f"permutation of the {self.num_prompts} prompts")
        return order

    def _issue(self, state: PromptState, decision: Decision) -> Request:
        hint = state.engine if decision.phase == PHASE_CONTINUE else None
        req = Request(state.prompt_index, decision.n, decision.phase, self._next_id, state.epoch, hint)
        self._next_id += 1
        state.request = req
        state.status = STATUS_OF_PHASE[decision.phase]
        self._inflight[req.request_id] = state
        return req

    def _apply(self, state: PromptState, decision: Decision) -> None:
        if decision.verdict in (REQUEST, ACCEPT) and self._is_stale(state):
            self._rescreen(state)  # its continuation or its training would use stale samples
        elif decision.verdict == REQUEST:
            self._outbox.append(self._issue(state, decision))
        elif decision.verdict == ACCEPT:
            n = self.config.n_samples_per_prompt
            if len(state.responses) != n:
                raise RuntimeError(
                    f"strategy {self.config.strategy!r} accepted a group of {len(state.responses)} "
                    f"responses; groups must have exactly {FLAGS['n_samples_per_prompt']} = {n}"
                )
            state.status = STATUS_READY
            self._ready.append(state)
        elif decision.verdict == REJECT:
            state.status = STATUS_REJECTED
            tokens = sum(r.num_tokens for r in state.responses)
            self._window.rejected += 1
            self._window.tokens["discarded"] += tokens
            self._totals["prompts_rejected"] += 1
            self._totals["tokens_discarded"] += tokens
        else:
            raise RuntimeError(f"strategy {self.config.strategy!r} after_scored() returned {decision}")

    def _is_stale(self, state: PromptState) -> bool:
        age = screening_age(state, self.policy_version)
        return stale_reason(age, self.config.max_staleness) is not None

    def _expire_stale(self) -> None:
        """Re-screen every ready group whose screening has aged past the bound."""
        stale = [s for s in self._ready if self._is_stale(s)]
        if stale:
            self._ready = [s for s in self._ready if not self._is_stale(s)]
            for state in stale:
                self._rescreen(state)

    def _rescreen(self, state: PromptState) -> None:
        """Discard the prompt's responses (counted) and request its first request again,
        of the same size and phase, from the current policy."""
        tokens = sum(r.num_tokens for r in state.responses)
        self._window.tokens["discarded"] += tokens
        self._window.stale_rescreened += 1
        self._totals["tokens_discarded"] += tokens
        self._totals["tokens_stale_discarded"] += tokens
        self._totals["prompts_rescreened_stale"] += 1
        self._count_reason(REASON_STALE)
        state.responses = []
        phase = PHASE_FULL if state.n_screen == self.config.n_samples_per_prompt else PHASE_SCREEN
        self._outbox.append(self._issue(state, Decision(REQUEST, REASON_STALE, state.n_screen, phase)))

    def _count_reason(self, reason: str) -> None:
        self._window.reasons[reason] += 1
        self._totals[f"reason/{reason}"] += 1

    def _count_screening(self, rewards: np.ndarray, passed: bool) -> None:
        k = int(np.sum(rewards >= self.config.correct_threshold))
        self._window.hist[(k, len(rewards))] += 1
        self._window.screened += 1
        self._window.qualified += int(passed)
        self._totals["prompts_screened"] += 1
        self._totals["prompts_qualified"] += int(passed)
        self._pace = [self._pace[0] * PACE_DECAY + passed, self._pace[1] * PACE_DECAY + 1.0]
        if starvation_due(self._window.screened, self.config.batch_prompts):
            message = starvation_warning(self._window, self.config)
            if message:
                self._warnings.append(message)
                warnings.warn(message, StarvationWarning, stacklevel=3)

    def _check_hard_limit(self) -> None:
        cfg = self.config
        limit = cfg.max_screened_per_batch
        if limit is not None and self._window.screened > limit and len(self._ready) < cfg.batch_prompts:
            raise StarvationError(starvation_error_message(self._window, cfg, len(self._ready)))

    # ---- checkpointing ----------------------------------------------------------------

    def state_dict(self) -> dict:
        """Plain picklable python and numpy arrays; payloads are included as given."""
        return {
            "format": STATE_FORMAT,
            "config": dataclasses.asdict(self.config),
            "num_prompts": self.num_prompts,
            "epoch": self._epoch,
            "position": self._position,
            "next_request_id": self._next_id,
            "step": self._step,
            "policy_version": self.policy_version,
            "inflight": [s.to_plain() for _, s in sorted(self._inflight.items())],
            "ready": [s.to_plain() for s in self._ready],
            "window": self._window.to_plain(),
            "totals": dict(self._totals),
            "history": self.history.state_dict(),
            "order": self._order.astype(np.int32 if self.num_prompts < 2**31 else np.int64),
            "strategy": self.strategy.state_dict(),
            "pace": list(self._pace),
        }

    def load_state_dict(self, d: dict) -> None:
        """Restore; outstanding requests are handed out again by the next next_requests()."""
        self._check_compatible(d)
        self._epoch, self._position = d["epoch"], d["position"]
        self._next_id, self._step = d["next_request_id"], d["step"]
        self.policy_version = d["policy_version"]
        inflight = [PromptState.from_plain(p) for p in d["inflight"]]
        self._inflight = {s.request.request_id: s for s in inflight}
        # Sorted by id = creation order: what the driver had, then what it had not fetched.
        self._outbox = [s.request for s in inflight]
        self._ready = [PromptState.from_plain(p) for p in d["ready"]]
        self._window = Window.from_plain(d["window"])
        self._totals = collections.Counter(d["totals"])
        self.history = PromptHistory(self.num_prompts, decay=self.strategy.history_decay(self.config))
        if d["format"] == 1:
            self.history.load_records_v1(d["history"])
            self._order = self.epoch_order(self._epoch)  # no strategy reordered epochs then
        else:
            self.history.load_state_dict(d["history"])
            self._order = np.asarray(d["order"], dtype=np.int64)
            self.strategy.load_state_dict(d["strategy"])
        self._pace = list(d.get("pace", PACE_PRIOR))  # absent before pacing: its prior

    def _check_compatible(self, d: dict) -> None:
        if d.get("format") not in (1, STATE_FORMAT):
            raise ValueError(f"unknown scheduler state format {d.get('format')!r} (expected 1 or {STATE_FORMAT})")
        now = dataclasses.asdict(self.config)
        changed = [
            f"{FLAGS.get(k, k)} (checkpoint {v!r}, now {now.get(k)!r})"
            for k, v in d["config"].items()
            if now.get(k) != v and k not in RESUMABLE_CHANGES
        ]
        if d["num_prompts"] != self.num_prompts:
            changed.append(f"dataset size (checkpoint {d['num_prompts']}, now {self.num_prompts})")
        if changed:
            raise ValueError(
                "cannot resume the SPEED curriculum: these differ from the checkpoint and define "
                "the epoch order or the group layout: " + "; ".join(changed)
            )
