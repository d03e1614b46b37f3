"""Training-step pieces for a Megatron-Core GPTModel driven by a plain torch optimizer
(AdamW, with fp32 master weights for bf16 parameters: `MasterWeightsAdamW`).

Megatron's own optimizer/DDP stack (DDP grad buffers, distributed optimizer) is not used
here: on CPU it buys nothing, and the actor keeps OpenRLHF's optimizer semantics; only the
name `main_grad` for the fp32 gradient is borrowed from it. What
Megatron's `finalize_model_grads` would otherwise do is here instead:
- `allreduce_tied_embedding_grads`: with tied embeddings and pp > 1 the first and the last
  stage each hold a copy of the embedding; their gradients are summed so both copies take
  the same step.
- `grad_norm` / `grad_norm_tensor`: the global L2 norm over TP x PP, counting TP-replicated parameters (norms)
  once and the last stage's tied copy not at all (the same rule as Megatron's clip_grads).
- `all_finite`: the non-finite guard: one collective verdict over every rank, so a NaN or
  inf loss or gradient on any rank skips the optimizer step on all of them (Megatron's own
  optimizer skips such an iteration too; a clip test `coef < 1.0` is False for NaN and
  would let it through).
Data parallelism (gradient all-reduce over the DP group) is the caller's.
"""

import torch
import torch.distributed as dist


def grad_of(param):
    """The gradient to reduce, clip and step with: the fp32 `main_grad` that
    `MasterWeightsAdamW` accumulates into (Megatron's own name for it), else `.grad`."""
    return param.main_grad if hasattr(param, "main_grad") else param.grad


def allreduce_tied_embedding_grads(model) -> None:
    """Sum the embedding gradients of the first and last pipeline stage (tied, pp > 1)."""
    from megatron.core import parallel_state as ps

    if not getattr(model, "share_embeddings_and_output_weights", False):
        return
    if ps.get_pipeline_model_parallel_world_size() == 1 or not ps.is_rank_in_embedding_group():
        return
    weight = model.shared_embedding_or_output_weight()
    if grad_of(weight) is None:
        if hasattr(weight, "main_grad"):
            weight.main_grad = torch.zeros_like(weight, dtype=torch.float32)
        else:
            weight.grad = torch.zeros_like(weight)
    dist.all_reduce(grad_of(weight), group=ps.get_embedding_group())


def all_finite(model, losses, group=None) -> bool:
    """True when `losses` (a tensor) and every local gradient are finite on every rank of
    `group` (default: the whole actor world). Collective: all ranks must call it. The per-tensor
    checks stay on the device; the verdict is the one host sync of the step."""
    device = next(model.parameters()).device
    checks = [torch.isfinite(losses).all().to(device)]
    checks += [torch.isfinite(grad).all() for grad in map(grad_of, model.parameters()) if grad is not None]
    bad = (~torch.stack(checks).all()).float().reshape(1)
    if dist.is_initialized():
        dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=group)
    return bad.item() == 0.0


def grad_norm_tensor(model) -> torch.Tensor:
    """Global gradient L2 norm of a (TP x PP)-parallel model, on every rank, as a 0-dim
    float64 tensor on the model's device (no host sync)."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
    from megatron.core.transformer.module import param_is_not_shared

    device = next(model.parameters()).device
    squares = torch.zeros((), dtype=torch.float64, device=device)
    for param in model.parameters():
        grad = grad_of(param)
        if grad is None or not param_is_not_shared(param):
            continue
        if param_is_not_tensor_parallel_duplicate(param):
            squares += grad.detach().double().pow(2).sum()
    dist.all_reduce(squares, group=ps.get_model_parallel_group())
    return squares.sqrt()


def grad_norm(model) -> float:
    """`grad_norm_tensor` as a Python float."""
    return grad_norm_tensor(model).item()


class MasterWeightsAdamW:
    """AdamW over fp32 master copies of low-precision (bf16) parameters.

    A bf16 parameter cannot take the small updates of an RL fine-tune (lr 1e-6 x an Adam
    step is below bf16's resolution for most weights), and a bf16 gradient summed over many
    micro-batches loses the small ones. So, as Megatron's mixed-precision optimizer does:
    a hook on every parameter adds each micro-batch's bf16 gradient into an fp32
    `param.main_grad` and frees the bf16 one; reductions and clipping use `main_grad`
    (`grad_of`); AdamW steps fp32 master copies with it, and the model's parameters are
    overwritten with the rounded result. With fp32 parameters (the CPU default) use plain
    `torch.optim.AdamW`. `inner` is the torch optimizer (an LR scheduler wraps it). Memory
    per parameter: 2 (bf16) + 4 (main_grad) + 4 (master) + 8 (m, v) bytes."""

    def __init__(self, param_groups, fused_wgrad: bool = False, **adamw_kwargs):
        self.fused_wgrad = fused_wgrad
        self._pairs = []
        master_groups = []
        for group in param_groups:
            masters = []
            for param in group["params"]:
                master = param.detach().float().clone()
                param.main_grad = None
                param.register_post_accumulate_grad_hook(self._accumulate)
                self._pairs.append((param, master))
                masters.append(master)
            master_groups.append({**group, "params": masters})
        self.inner = torch.optim.AdamW(master_groups, **adamw_kwargs)
        self.param_groups = self.inner.param_groups

    @staticmethod
    @torch.no_grad()
    def _accumulate(param) -> None:
        if param.grad is None:
            return
        if param.main_grad is None:
            param.main_grad = param.grad.float()
        else:
            param.main_grad.add_(param.grad)
        param.grad = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Start an optimizer step's accumulation. With `fused_wgrad` (Megatron's
        gradient_accumulation_fusion) the linear layers' weight-gradient GEMMs add into
        `main_grad` themselves and return no `.grad`, so the buffers must exist, zeroed,
        before the first backward; the other parameters still come through the hook."""
        for param, _ in self._pairs:
            param.grad = None
            if self.fused_wgrad:
                if param.main_grad is None:
                    param.main_grad = torch.zeros_like(param, dtype=torch.float32)
                else:
                    param.main_grad.zero_()
            else:
                param.main_grad = None

    def release_grads(self) -> None:
        """Free every gradient buffer (after a training step, before an offload)."""
        for param, _ in self._pairs:
            param.grad = None
            param.main_grad = None

    @torch.no_grad()
    def step(self) -> None:
        for param, master in self._pairs:
            master.grad = param.main_grad
        self.inner.step()
        for param, master in self._pairs:
            param.copy_(master)
            master.grad = None

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "master": [m for _, m in self._pairs]}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state["inner"])
        for (param, master), saved in zip(self._pairs, state["master"]):
            master.copy_(saved)
            param.copy_(saved)


def make_optimizer(model, lr, betas, eps, weight_decay, master_weights: bool, fused_wgrad: bool = False):
    """AdamW with OpenRLHF's parameter groups (no decay on biases and norms), over fp32
    master weights when the model's parameters are low precision. Not OpenRLHF's own
    `get_optimizer_grouped_parameters`: its name list ("norm.weight", ...) misses Transformer
    Engine's fused `linear_qkv.layer_norm_weight`, which would then be decayed."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if name.endswith("bias") or "norm" in name else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=lr, betas=tuple(betas), eps=eps)
    if master_weights:
        return MasterWeightsAdamW(groups, fused_wgrad=fused_wgrad, **kwargs)
    if fused_wgrad:
        raise ValueError("gradient_accumulation_fusion needs master weights (bf16 parameters): the fused GEMMs "
                         "accumulate into the fp32 main_grad that only MasterWeightsAdamW keeps")
    return torch.optim.AdamW(groups, **kwargs)
