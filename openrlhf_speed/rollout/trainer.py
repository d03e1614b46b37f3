"""Our PPO trainer: OpenRLHF's `PPOTrainer` (a Ray actor class) with the SPEED samples
generator plugged in, a readable per-step console line, and the checks and timings we add.

What a training step is stays OpenRLHF's: one step trains on one rollout batch of
B * N samples (`--rollout.batch_size` prompts x `--rollout.n_samples_per_prompt`), split
into optimizer steps of `--train.batch_size` samples, repeated `--train.max_epochs` times:
B * N / train.batch_size * max_epochs optimizer steps per training step.

Step anatomy with SPEED: generate_samples (the curriculum fills a batch; pre-fetched
requests keep running) -> experience -> train (meanwhile the driver's feeding thread keeps
the engines busy, `--speed.feed_during_training`) -> drain (stop feeding, collect requests
still in flight, so none straddles a weight change) -> weight sync (policy version + 1) -> checkpoint
(the curriculum state first, then the actor's, then the manifest that makes it complete; see
rollout/checkpoint.py for why that order, and which checkpoint a rerun with --ckpt.load_enable
reads, and rollout/ckpt_manifest.py for a damaged checkpoint and a full disk).

The reward is computed inside the vLLM engine actors as each response finishes, so it
overlaps generation; `timing_parts/reward` is the reward function's own time summed over the
batch's samples and `timing/generation` still contains it.

Rewards: before the experience is made, every sample's reward must be present and finite
(`_check_rewards`); otherwise the run stops there, before advantages or an optimizer step.
With SPEED this cannot trigger (the driver regenerates such responses, rewards/guard.py,
and reports `reward/*` metrics); it covers `--speed.strategy off`, where OpenRLHF's own
generator passes rewards through. Without SPEED, `reward/timeouts`, `reward/refused` and
`reward/errors` are counted over the trained samples from the reward function's flags.

Generation only (`--train.generation_only`, the engine's limit measured apart from training,
bench/driver.py): each step fills its batch through the SPEED driver exactly as in training,
then skips experience, PPO training and the weight sync, so the policy never changes and
pre-fetched requests keep streaming from one step into the next (no drain between steps).
Its step record keeps `timing/generation`, the driver's `timing_parts/*` and `driver/*`
figures; after the last step the requests still in flight are drained and logged as one
`{"event": "drain"}` record (their tokens and seconds), so every request of the trace is
counted on the driver's side too.

Run log (`--log.jsonl`): one line per step and per evaluation. `train_wall_s` is the
training clock the paper reports: wall-clock since `fit` started, minus evaluation and
checkpointing. `eval_accuracy` is the mean reward over all `eval_num_samples` evaluation
samples (pass@1 estimated with `--eval.n_samples_per_prompt` samples), the figure
`openrlhf-speed evaluate` reports as accuracy. Each checkpoint also redraws the run's
`curves.png` from the log (rollout/curves.py; off the training clock, as checkpointing is).

Progress bars: upstream's loop draws one per `--train.num_episodes`, but the SPEED curriculum
runs every epoch inside the first; once it has no batch left (`--train.max_steps`, or the
last epoch) the later episodes' bars are drawn disabled (`episode_bars`), so none prints.
"""

import contextlib
import json
import os
import shutil
import sys
import time

import ray
import torch
from tqdm import tqdm

from openrlhf_speed.backends.fingerprints import compare
from openrlhf_speed.rewards.guard import RewardError, invalid_reason
from openrlhf_speed.rollout import ckpt_manifest
from openrlhf_speed.rollout.ckpt_manifest import DiskFullError
from openrlhf_speed.rollout.checkpoint import (ACTOR_DIR, ResumeError, adopt_folder, atomic_save,
                                               curriculum_state_path, resume_hint, resume_point, saved_steps)
from openrlhf_speed.rollout.speed_config import speed_config
from openrlhf_speed.rollout.run_summary import CURVES, read_records, run_folder, run_records
from openrlhf_speed.rollout.trace import append_whole, open_append


def _reward_seconds(rollout_samples) -> float:
    """The reward function's seconds over the batch (`timing_parts/reward`)."""
    return sum(float(s.info["reward_time"].sum()) for s in rollout_samples if "reward_time" in s.info)


def _check_rewards(rollout_samples, global_step: int) -> dict:
    """Raise RewardError when a sample's reward is missing or not finite; else the
    `reward/*` counts of the samples' flags (reward_timeout, reward_refused, reward_error)."""
    bad = [(i, why) for i, s in enumerate(rollout_samples) if (why := invalid_reason(s.rewards)) is not None]
    if bad:
        raise RewardError(
            f"{len(bad)} of {len(rollout_samples)} samples of training step {global_step} have a reward that is "
            f"missing (the reward function raised) or not finite, first: sample {bad[0][0]} ({bad[0][1]}). "
            "Training on them would corrupt the advantages; fix the reward function (OpenRLHF logs its "
            "exceptions at INFO level), or use the SPEED driver, which regenerates such responses."
        )
    counts = {}
    for key, name in (("reward_timeout", "timeouts"), ("reward_refused", "refused"), ("reward_error", "errors")):
        counts[f"reward/{name}"] = sum(float(s.info[key].sum()) for s in rollout_samples if key in s.info)
    return counts


def group_token_metrics(rollout_samples, n: int) -> dict:
    """Stock OpenRLHF's step (`--speed.strategy off`) in the driver's token terms, so that the
    benchmark compares like with like: every response is generated, full and trained, and a
    group's tokens are useful when its N rewards are not all equal (RLOO's advantages are
    zero otherwise). Groups are the N contiguous samples of one prompt, as OpenRLHF's
    generator returns them; with dynamic filtering the batch need not hold whole groups, and
    the share is left out."""
    lengths = [float(s.response_length.sum()) for s in rollout_samples]
    total = sum(lengths)
    out = {"speed/tokens_generated": total, "speed/tokens_full": total, "speed/tokens_trained": total}
    if n > 0 and total and len(lengths) % n == 0:
        # One set, as the driver's share (curriculum/metrics.py): the step's responses, all trained.
        rewards = [float(s.rewards.sum()) for s in rollout_samples]
        useful = sum(sum(lengths[g:g + n]) for g in range(0, len(lengths), n)
                     if max(rewards[g:g + n]) != min(rewards[g:g + n]))
        out["speed/tokens_useful"] = useful
        out["speed/useful_token_share"] = useful / total
    return out


def step_line(step: int, status: dict) -> str:
    """One console line per training step: what a user watches."""
    parts = [f"step {step}"]
    gen, lost = status.get("speed/tokens_generated"), status.get("speed/tokens_discarded")
    if gen and lost is not None and lost == lost:  # the step's generated tokens thrown away (screenings, filters)
        status = {**status, "speed/discarded_share": lost / gen}
    for key, label, fmt in (
        ("rollout/reward_mean", "reward", "{:.3f}"),
        ("rollout/response_length_mean", "resp_len", "{:.1f}"),
        ("policy_loss", "loss", "{:.4f}"),
        ("actor_grad_norm", "grad_norm", "{:.3f}"),
        ("speed/qualification_rate", "qualified", "{:.2f}"),
        ("speed/useful_token_share_cum", "useful_tokens", "{:.2f}"),
        ("speed/discarded_share", "discarded", "{:.2f}"),
        ("speed/buffer_size", "buffer", "{:.0f}"),
        ("speed/staleness_screen_mean", "staleness", "{:.2f}"),
        ("driver/tokens_returned", "gen_tokens", "{:.0f}"),
    ):
        # A curriculum figure that does not apply reads NaN (uniform's qualification): left out.
        if key in status and not (key.startswith("speed/") and status[key] != status[key]):
            parts.append(f"{label} {fmt.format(status[key])}")
    if status.get("reward/errors") or status.get("reward/timeouts") or status.get("reward/refused"):
        parts.append("reward errors {:.0f} timeouts {:.0f} refused {:.0f}".format(
            *(status.get(f"reward/{k}", 0) for k in ("errors", "timeouts", "refused"))))
    timings = [
        ("generation", "timing/generation"),
        ("reward", "timing_parts/reward"),
        ("experience", "timing/make_experience"),
        ("train", "timing/ppo_train"),
        ("drain", "timing_parts/drain"),
        ("curriculum", "timing_parts/curriculum_overhead"),
        ("weight_sync", "timing/broadcast"),
    ]
    split = " ".join(f"{name} {status[key]:.1f}s" for name, key in timings if key in status)
    if split:
        parts.append(f"time [{split}]")
    return " | ".join(parts)


def episode_bars(done):
    """Upstream fit()'s `tqdm`: a bar that is drawn disabled (prints nothing) once `done()`."""
    def bar(*args, **kwargs):
        return tqdm(*args, disable=kwargs.pop("disable", False) or done(), **kwargs)
    return bar


def make_trainer_class(upstream_actor_class):
    base = upstream_actor_class.__ray_actor_class__

    class SpeedPPOTrainer(base):
        _fingerprints = None
        _resume_sync = False
        _drain_time = 0.0
        _clock_start = None
        _excluded_s = 0.0  # evaluation + checkpointing, off the training clock
        _state_saved_step = None  # the step whose curriculum state this process wrote last
        _init_error = None  # a full disk under the trace's first lines, raised by get_max_steps

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            config = speed_config(self.args)
            if config is not None:
                from openrlhf_speed.rollout.speed_generator import SpeedSamplesGenerator

                try:
                    self.samples_generator = SpeedSamplesGenerator(
                        self.strategy, self.prompts_dataloader, self.eval_dataloader, self.tokenizer,
                        self.vllm_engines, config, trace_path=self.args.speed.trace_path,
                        max_steps=self.args.train.max_steps,
                    )
                except DiskFullError as e:
                    # Raised here, Ray reports the actor's creation as failed and its worker logs
                    # the traceback ("Exception raised in creation task"); raised by the first
                    # method OpenRLHF calls, it is one line from cli/train.py like the others.
                    self._init_error = e
            self.speed = config is not None

        def get_max_steps(self):
            if self._init_error is not None:
                raise self._init_error
            return super().get_max_steps()

        def fit(self, global_step=0):
            if self.speed:
                self._restore_curriculum()
            # On resume the engines get the checkpoint's weights inside upstream fit(); the
            # first check then comes after the first step.
            if self.args.check.weight_sync and self.vllm_engines and not self._resume_sync:
                self.check_weight_sync(label="before training")
            if self.args.eval.at_start and self.eval_dataloader and not self._resume_sync:
                self.evaluate(0, **self._eval_kwargs())
            self._clock_start, self._excluded_s = time.time(), 0.0
            # The globals upstream fit() reads `tqdm` from: its module's, or in a Ray worker the
            # copy cloudpickle made when it shipped the class by value (the driver had replaced
            # the module's PPOTrainer with this class, so the name no longer led to it).
            upstream = base.fit.__globals__
            upstream["tqdm"] = episode_bars(self._curriculum_done)
            try:
                result = super().fit(global_step)
            finally:
                upstream["tqdm"] = tqdm
            if self.args.train.generation_only:
                self._drain_generation_only()
            return result

        def _curriculum_done(self) -> bool:
            """The SPEED curriculum has no batch left: every later episode of upstream's loop is empty."""
            gen = self.samples_generator
            return self.speed and (gen.step_limit_reached() or gen.scheduler.exhausted)

        def _generation_only_step(self, rollout_samples, global_step):
            """train_step without experience, training or weight sync (--train.generation_only)."""
            status = {
                "timing_parts/reward": _reward_seconds(rollout_samples),
                "timing_parts/drain": 0.0,
                "rollout/reward_mean": float(torch.cat([s.rewards for s in rollout_samples]).float().mean()),
                "rollout/response_length_mean": float(
                    torch.cat([s.response_length for s in rollout_samples]).float().mean()),
                **self.samples_generator.last_metrics,
            }
            return status, global_step + 1

        def _drain_generation_only(self) -> None:
            """Collect what is still in flight after the last step and log it, so the driver's
            side counts every request the trace holds (bench/driver.py replays all of them)."""
            gen = self.samples_generator
            drain_s = gen.drain()
            record = {"event": "drain", "train_wall_s": self._train_wall_s(), "timing_parts/drain": drain_s,
                      "timing_parts/curriculum_overhead": gen.overhead_s, **gen.pop_counts()}
            gen.overhead_s = 0.0
            print(f"[openrlhf-speed] generation only: drained {record['driver/responses_returned']:.0f} responses "
                  f"({record['driver/tokens_returned']:.0f} tokens) in {drain_s:.1f}s after the last step", flush=True)
            self._log_jsonl(record)

        def _eval_kwargs(self) -> dict:
            # The same overrides upstream fit() applies before its evaluations.
            kwargs = dict(self.generate_kwargs)
            kwargs["temperature"] = self.args.eval.temperature
            kwargs["n_samples_per_prompt"] = self.args.eval.n_samples_per_prompt
            return kwargs

        def _train_wall_s(self) -> float:
            return time.time() - self._clock_start - self._excluded_s if self._clock_start else 0.0

        def _log_jsonl(self, record: dict) -> None:
            if not self.args.log.jsonl:
                return
            plain = {k: (float(v) if isinstance(v, (int, float)) else v) for k, v in record.items()
                     if isinstance(v, (int, float, str))}
            with open_append(self.args.log.jsonl, "the run log (--log.jsonl)") as f:
                append_whole(f, (json.dumps(plain) + "\n").encode(), "the run log (--log.jsonl)")

        def evaluate(self, global_step, **generate_kwargs):
            t0 = time.time()
            rewards = []
            upstream = self.samples_generator.generate_eval_samples

            def capture(**kwargs):  # keeps the samples so the overall accuracy needs no second pass
                # Upstream sends the held-out prompts in chunks of --rollout.batch_size and waits
                # for each; one chunk of every prompt keeps the engines full (seconds, not a minute).
                # The SPEED driver read --rollout.batch_size once, at its start (speed_config), and
                # evaluation runs between steps, so the brief change reaches nothing else.
                rollout = self.samples_generator.args.rollout
                chunk = rollout.batch_size
                rollout.batch_size = max(chunk, len(self.eval_dataloader.dataset))
                try:
                    samples = upstream(**kwargs)
                finally:
                    rollout.batch_size = chunk
                rewards.extend(float(r) for s in samples for r in s.rewards)
                return samples

            self.samples_generator.generate_eval_samples = capture
            try:
                logs = super().evaluate(global_step, **generate_kwargs)
            finally:
                del self.samples_generator.generate_eval_samples  # back to the class's method
            logs["eval_accuracy"] = sum(rewards) / max(len(rewards), 1)
            logs["eval_num_samples"] = len(rewards)
            logs["eval_time_s"] = time.time() - t0
            self._excluded_s += logs["eval_time_s"]
            print(f"[openrlhf-speed] eval step {global_step} | accuracy {logs['eval_accuracy']:.4f} over "
                  f"{len(rewards)} samples | train_wall {self._train_wall_s():.1f}s | eval {logs['eval_time_s']:.1f}s",
                  flush=True)
            self._log_jsonl({"event": "eval", "step": global_step, "train_wall_s": self._train_wall_s(), **logs})
            return logs

        def train_step(self, rollout_samples, global_step):
            if self.args.train.generation_only:
                return self._generation_only_step(rollout_samples, global_step)
            reward_time = _reward_seconds(rollout_samples)
            # A reward model scores later, inside the experience maker: nothing to check yet.
            reward_counts = {} if self.args.reward.model_name_or_path else _check_rewards(rollout_samples, global_step)
            if self.speed and self.args.speed.feed_during_training == "on":
                self.samples_generator.start_feeding()  # until the drain in broadcast_to_vllm
            status, step = super().train_step(rollout_samples, global_step)
            if not self.speed:  # SPEED reports reward/* over every scored response instead
                status.update(reward_counts)
                status.update(group_token_metrics(rollout_samples, self.args.rollout.n_samples_per_prompt))
            status["timing_parts/reward"] = reward_time
            status["timing_parts/drain"] = self._drain_time
            if self.speed:
                status.update(self.samples_generator.last_metrics)
            if self.args.check.weight_sync and self.vllm_engines:
                status.update(self.check_weight_sync(label=f"after step {step}"))
            return status, step

        def broadcast_to_vllm(self):
            if self.speed:
                self._drain_time = self.samples_generator.drain()
            super().broadcast_to_vllm()
            if self.speed and not self._resume_sync:
                self.samples_generator.policy_version += 1
            self._resume_sync = False

        def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
            if logs_dict:
                print(f"[openrlhf-speed] {step_line(global_step, logs_dict)}", flush=True)
                self._log_jsonl({"event": "step", "step": global_step, "train_wall_s": self._train_wall_s(),
                                 **logs_dict})
            t0 = time.time()
            saving = global_step % self.args.ckpt.save_steps == 0
            with self._checkpoint_write(f"global_step{global_step}", global_step) if saving else contextlib.nullcontext():
                # The curriculum state before the actor's checkpoint: the actor's `latest` then
                # never names a step whose curriculum state is not complete on disk.
                if self.speed and saving:
                    self._save_curriculum(global_step)
                super().save_logs_and_checkpoints(global_step, logs_dict, client_states)
            if saving:
                self._draw_curves()
            self._excluded_s += time.time() - t0

        def _draw_curves(self) -> None:
            """The run folder's curves.png from the run log so far (rollout/curves.py)."""
            log = self.args.log.jsonl
            if log and os.path.isfile(log):
                from openrlhf_speed.rollout.curves import redraw

                folder = run_folder(self.args.ckpt.path)
                redraw(run_records(read_records(log)), os.path.join(folder, CURVES), folder)

        def save_best_checkpoint(self, eval_metrics, global_step, client_states=None):
            # A new best evaluation saves the tag best_global_stepK and points the actor's
            # `latest` at it: the curriculum state of step K must exist first (it may not be
            # a --ckpt.save_steps step). It is checkpointing, so off the training clock: each
            # new best held-out accuracy writes the actor and its optimizer (tens of MB).
            t0 = time.time()
            with self._checkpoint_write(f"best_global_step{global_step}", global_step):
                # Saved already when K is a --ckpt.save_steps step: rewriting it would change the
                # file the regular checkpoint's manifest vouches for.
                if self.speed and eval_metrics and self._state_saved_step != global_step:
                    self._save_curriculum(global_step)
                super().save_best_checkpoint(eval_metrics, global_step, client_states)
            self._excluded_s += time.time() - t0

        # -- checkpoint integrity (rollout/ckpt_manifest.py) ------------------------------
        @contextlib.contextmanager
        def _checkpoint_write(self, tag: str, step: int):
            """Around one checkpoint save: before it, the folder is marked as one whose tags
            carry manifests; after it, the manifest of `tag` (if the actor wrote it) is written
            last. A save that fails with the disk full removes what it wrote of `tag` and stops
            the run with CheckpointDiskFullError, one line naming the folder and the space."""
            ckpt, hashed = self.args.ckpt.path, getattr(self.args.ckpt, "verify", "sha256") == "sha256"
            try:
                adopt_folder(ckpt, hashed=hashed)
                yield
                if os.path.isdir(os.path.join(ckpt, ACTOR_DIR, tag)):
                    state = curriculum_state_path(ckpt, step) if self.speed else None
                    ckpt_manifest.write_manifest(ckpt, tag, state, hashed=hashed)
            except Exception as e:
                folder = os.path.join(ckpt, ACTOR_DIR)
                needed = (ckpt_manifest.last_checkpoint_bytes(ckpt, exclude=tag)
                          or ckpt_manifest.model_state_bytes(self.args.actor.model_name_or_path))
                if not ckpt_manifest.is_disk_full(e, folder, needed):
                    raise
                self._remove_unfinished(tag, step)
                raise ckpt_manifest.CheckpointDiskFullError(ckpt_manifest.disk_full_message(
                    folder, tag, needed, resume_hint(ckpt, self.args.ckpt.load_enable))) from e

        def _remove_unfinished(self, tag: str, step: int) -> None:
            """After a failed save: the tag's files and, unless a complete checkpoint of its
            step remains, its curriculum state; `latest` back on the last complete tag."""
            ckpt = self.args.ckpt.path
            shutil.rmtree(os.path.join(ckpt, ACTOR_DIR, tag), ignore_errors=True)
            try:
                kept = resume_point(ckpt, curriculum=self.speed, apply=True).step
            except ResumeError:  # the message's resume hint says what is wrong
                return
            state = curriculum_state_path(ckpt, step)
            if kept < step and os.path.isfile(state):
                os.remove(state)

        # -- curriculum checkpoints ----------------------------------------------------
        def init_checkpoint_states(self):
            states = super().init_checkpoint_states()
            if "global_step" not in states:
                # `_actor` exists but holds no complete checkpoint yet (the first save was
                # cut short, so there is no `latest`): the actor loaded nothing, start fresh.
                states = {"episode": 0, "global_step": 0, "total_consumed_prompts": 0, "data_loader_state_dict": {}}
            return states

        def _save_curriculum(self, global_step: int) -> None:
            state = self.samples_generator.state_dict()
            atomic_save(state, curriculum_state_path(self.args.ckpt.path, global_step))
            self._state_saved_step = global_step
            self.samples_generator.log_saved(global_step, state)
            # One more than the actor keeps: if a crash cuts the actor's save that follows,
            # `latest` still names the previous step, whose state must still be here.
            steps = saved_steps(self.args.ckpt.path)
            for old in steps[: max(0, len(steps) - self.args.ckpt.max_num - 1)]:
                os.remove(curriculum_state_path(self.args.ckpt.path, old))

        def _restore_curriculum(self) -> None:
            step = self.init_checkpoint_states()["global_step"]
            if not step:
                if self.args.ckpt.load_enable:
                    print(f"[openrlhf-speed] no checkpoint to resume in {self.args.ckpt.path}: starting fresh", flush=True)
                return
            # The step the actor loaded (its `latest`), so never a newer, half-written state.
            path = curriculum_state_path(self.args.ckpt.path, step)
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"resuming from global_step {step}, but the curriculum state {path} is missing: the checkpoint "
                    "was not written by openrlhf-speed with this --ckpt.path, or the file was deleted. Resume from a "
                    "complete checkpoint, or start over without --ckpt.load_enable."
                )
            t0 = time.time()
            self.samples_generator.load_state_dict(torch.load(path, weights_only=False))
            self._resume_sync = True  # upstream fit re-syncs the same weights on resume
            print(f"[openrlhf-speed] resuming from step {step}: restored the curriculum state of step {step} from "
                  f"{path} in {time.time() - t0:.2f}s", flush=True)

        # -- weight-sync check ---------------------------------------------------------
        def check_weight_sync(self, label: str) -> dict:
            """Bit-exact comparison of actor and engine tensors; raises on any mismatch."""
            actor = ray.get(self.actor_model_group.async_run_method(method_name="weight_fingerprints"))[0]
            engines = ray.get([engine.weight_fingerprints.remote() for engine in self.vllm_engines])
            results = [compare(actor, fp, self._fingerprints) for fp in engines]
            for i, r in enumerate(results):
                if r["mismatched"] or not r["compared"]:
                    raise RuntimeError(
                        f"weight sync check {label}: engine {i} differs from the actor on "
                        f"{len(r['mismatched'])}/{r['compared']} tensors (first: {r['mismatched'][:3]}; actor has "
                        f"{sorted(actor)[:3]}..., engine has {sorted(engines[i])[:3]}...)"
                    )
            changed = results[0]["changed"] if self._fingerprints is not None else 0
            print(
                f"[openrlhf-speed] weight sync check {label}: {results[0]['compared']} tensors bit-identical "
                f"between actor and {len(engines)} engine(s); {changed} changed since the previous check",
                flush=True,
            )
            self._fingerprints = actor
            out = {"check/weight_sync_tensors": results[0]["compared"], "check/weight_sync_changed": changed}
            if self.args.rollout.temperature == 1.0:
                out["check/logprob_max_abs_diff"] = self.compare_logprobs(label)
            return out

        def compare_logprobs(self, label: str) -> float:
            """max |log p_engine - log p_actor| over the tokens of one fixed text: the
            engine's prompt log-probs against the actor group's own `forward` (the log-probs
            that train). At temperature 1 both are the plain softmax; they differ only by
            the two sides' numerics (dtype, kernels), which the figure shows."""
            from vllm import SamplingParams

            ids = self.tokenizer("Question: what is 17 + 25? Answer: 17 + 25 = 42, so the answer is 42.")["input_ids"]
            params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
            outputs = ray.get([engine.generate.remote(ids, params) for engine in self.vllm_engines])
            group = self.actor_model_group
            replicas = len(group._actor_handlers) // group.duplicate_actors
            seq = torch.tensor([ids])
            refs = group.async_run_method_batch(
                method_name="forward", sequences=[seq] * replicas,
                action_mask=[torch.ones(1, len(ids) - 1, dtype=torch.bool)] * replicas,
                attention_mask=[torch.ones(1, len(ids), dtype=torch.long)] * replicas,
            )
            actor = ray.get(refs)[0][0][0]  # first replica's first call: [A = T - 1]
            worst = 0.0
            for out in outputs:
                engine = torch.tensor([out.prompt_logprobs[t][ids[t]].logprob for t in range(1, len(ids))])
                worst = max(worst, (engine - actor.float()).abs().max().item())
            print(f"[openrlhf-speed] log-prob check {label}: max |engine - actor| = {worst:.2e} over "
                  f"{len(ids) - 1} tokens, {len(outputs)} engine(s)", flush=True)
            return worst

    SpeedPPOTrainer.__name__ = SpeedPPOTrainer.__qualname__ = "SpeedPPOTrainer"
    return ray.remote(SpeedPPOTrainer)
