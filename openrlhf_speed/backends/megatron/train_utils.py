"""Training-step pieces for a Megatron-Core GPTModel driven by a plain torch optimizer.

Megatron's own optimizer/DDP stack (main_grad buffers, distributed optimizer) is not used
here: on CPU it buys nothing, and the actor keeps OpenRLHF's optimizer semantics. What
Megatron's `finalize_model_grads` would otherwise do is here instead:
- `allreduce_tied_embedding_grads`: with tied embeddings and pp > 1 the first and the last
  stage each hold a copy of the embedding; their gradients are summed so both copies take
  the same step.
- `grad_norm`: the global L2 norm over TP x PP, counting TP-replicated parameters (norms)
  once and the last stage's tied copy not at all (the same rule as Megatron's clip_grads).
Data parallelism (gradient all-reduce over the DP group) is the caller's.
"""

import torch
import torch.distributed as dist


def allreduce_tied_embedding_grads(model) -> None:
    """Sum the embedding gradients of the first and last pipeline stage (tied, pp > 1)."""
    from megatron.core import parallel_state as ps

    if not getattr(model, "share_embeddings_and_output_weights", False):
        return
    if ps.get_pipeline_model_parallel_world_size() == 1 or not ps.is_rank_in_embedding_group():
        return
    weight = model.shared_embedding_or_output_weight()
    if weight.grad is None:
        weight.grad = torch.zeros_like(weight)
    dist.all_reduce(weight.grad, group=ps.get_embedding_group())


def grad_norm(model) -> float:
    """Global gradient L2 norm of a (TP x PP)-parallel model, on every rank."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
    from megatron.core.transformer.module import param_is_not_shared

    device = next(model.parameters()).device
    squares = torch.zeros((), dtype=torch.float64, device=device)
    for param in model.parameters():
        if param.grad is None or not param_is_not_shared(param):
            continue
        if param_is_not_tensor_parallel_duplicate(param):
            squares += param.grad.detach().double().pow(2).sum()
    dist.all_reduce(squares, group=ps.get_model_parallel_group())
    return squares.sqrt().item()
