"""Non-finite guard for OpenRLHF's DeepSpeed actor: a NaN or inf loss or gradient norm stops
the run instead of being stepped into the weights.

Why stop rather than skip: in bf16 or fp32 DeepSpeed has no overflow skip (only its fp16
loss scaler skips), and with gradient accumulation the engine steps at the window boundary
on whatever the window's micro-batches accumulated: a micro-batch cannot be left out
without desynchronising DeepSpeed's accumulation state or biasing the step. The seam is the
strategy's `backward` and `optimizer_step`, which OpenRLHF's `ActorPPOTrainer.training_step`
calls for every micro-batch; `install` wraps them on the actor's strategy object.

- before `backward`: the loss is checked on every rank and the verdict all-reduced, so all
  ranks raise together (a raise on one rank alone would leave the others waiting in the
  gradient all-reduce). The weights stay those of the last good optimizer step.
- after `optimizer_step`: DeepSpeed's global gradient norm of that step (pre-clipping) is
  checked. A non-finite gradient from a finite loss is only visible there, after the
  step: the run then stops before the weights reach vLLM or a checkpoint.
The Megatron backend skips such a step instead (backends/megatron/fit.py): it owns its loop.
With SPEED the rewards are finite by construction (rewards/guard.py); this catches the
numerics (overflowing log-probs, a broken advantage) and non-SPEED runs.
"""

import math

import torch
import torch.distributed as dist


class NonFiniteTrainingError(RuntimeError):
    pass


def all_ranks_finite(value: torch.Tensor) -> bool:
    """True when `value` is finite on every rank of the default group (collective)."""
    bad = torch.tensor([0.0 if bool(torch.isfinite(value.detach()).all()) else 1.0], device=value.device)
    if dist.is_initialized():
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    return bad.item() == 0.0


def install(strategy) -> None:
    """Wrap `strategy.backward` and `strategy.optimizer_step` (idempotent)."""
    if getattr(strategy, "_openrlhf_speed_finite_guard", False):
        return
    strategy._openrlhf_speed_finite_guard = True
    backward, optimizer_step = strategy.backward, strategy.optimizer_step
    steps = {"n": 0}

    def guarded_backward(loss, model, optimizer, **kwargs):
        if not all_ranks_finite(loss):
            raise NonFiniteTrainingError(
                f"non-finite actor loss ({loss.item()} on this rank) after {steps['n']} optimizer steps of this "
                "process: the run stops before backward, so the weights are those of the last good step. Check "
                "the rewards (reward/* metrics), the advantages, and the log-prob numerics (bf16, temperature)."
            )
        return backward(loss, model, optimizer, **kwargs)

    def guarded_optimizer_step(optimizer, model, scheduler, name="model", **kwargs):
        out = optimizer_step(optimizer, model, scheduler, name=name, **kwargs)
        steps["n"] += 1
        norm = strategy.get_grad_norm(model)
        if norm is not None and not math.isfinite(float(norm)):
            raise NonFiniteTrainingError(
                f"non-finite gradient norm ({float(norm)}) at {name} optimizer step {steps['n']} of this process "
                "(the loss was finite): the run stops before these weights reach vLLM or a checkpoint; resume "
                "from the last checkpoint after finding the cause (bf16 overflow, extreme log-prob ratios)."
            )
        return out

    strategy.backward, strategy.optimizer_step = guarded_backward, guarded_optimizer_step
