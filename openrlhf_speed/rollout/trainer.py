"""Our PPO trainer: OpenRLHF's `PPOTrainer` (a Ray actor class) with a readable per-step
console line and the reward time split out of generation.

The reward is computed inside the vLLM engine actors as each response finishes (OpenRLHF's
`SingleTurnAgentExecutor`), so it overlaps generation; `timing/reward` is the reward
function's own time summed over samples (our reward function reports it per sample), and
`timing/generation` still contains it.
"""

import ray

from openrlhf_speed.rollout.weights import compare


def step_line(step: int, status: dict) -> str:
    """One console line per training step: what a user watches."""
    parts = [f"step {step}"]
    for key, label, fmt in (
        ("rollout/reward_mean", "reward", "{:.3f}"),
        ("rollout/response_length_mean", "resp_len", "{:.1f}"),
        ("policy_loss", "loss", "{:.4f}"),
        ("actor_grad_norm", "grad_norm", "{:.3f}"),
    ):
        if key in status:
            parts.append(f"{label} {fmt.format(status[key])}")
    timings = [
        ("generation", "timing/generation"),
        ("reward", "timing/reward"),
        ("experience", "timing/make_experience"),
        ("train", "timing/ppo_train"),
        ("weight_sync", "timing/broadcast"),
    ]
    split = " ".join(f"{name} {status[key]:.1f}s" for name, key in timings if key in status)
    if split:
        parts.append(f"time [{split}]")
    return " | ".join(parts)


def make_trainer_class(upstream_actor_class):
    base = upstream_actor_class.__ray_actor_class__

    class SpeedPPOTrainer(base):
        _fingerprints = None

        def fit(self, global_step=0):
            if self.args.check.weight_sync and self.vllm_engines:
                self.check_weight_sync(label="before training")
            return super().fit(global_step)

        def train_step(self, rollout_samples, global_step):
            reward_time = sum(float(s.info["reward_time"].sum()) for s in rollout_samples if "reward_time" in s.info)
            status, step = super().train_step(rollout_samples, global_step)
            status["timing/reward"] = reward_time
            if self.args.check.weight_sync and self.vllm_engines:
                status.update(self.check_weight_sync(label=f"after step {step}"))
            return status, step

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
            return {"check/weight_sync_tensors": results[0]["compared"], "check/weight_sync_changed": changed}

        def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
            if logs_dict:
                print(f"[openrlhf-speed] {step_line(global_step, logs_dict)}", flush=True)
            return super().save_logs_and_checkpoints(global_step, logs_dict, client_states)

    SpeedPPOTrainer.__name__ = SpeedPPOTrainer.__qualname__ = "SpeedPPOTrainer"
    return ray.remote(SpeedPPOTrainer)
