"""The Megatron actor's compute: action log-probs and one PPO/RLOO policy update.

What OpenRLHF's DeepSpeed actor does in `Actor.forward` and `ActorPPOTrainer.training_step`,
for a Megatron-Core `GPTModel` (TP-sharded vocabulary, optionally pipelined); no Ray here.

Legend: B sequences, T tokens per sequence, A action positions (`action_mask.size(1)`,
T - 1 for OpenRLHF 0.11's experiences), V vocabulary, tp tensor-parallel size.

Conventions kept from OpenRLHF (so the numbers match its actor to rounding):
- rows are right-padded (`zero_pad_sequences(side="right")`): `attention_mask` is a prefix
  of ones. Under the causal mask a real token never sees the padding after it, so the
  model runs with Megatron's plain causal mask (the fast path of every attention kernel)
  instead of a [B, 1, T, T] padding mask; left padding is refused, not approximated;
- position ids `cumsum(attention_mask) - 1`, padding positions set to 1;
- logits are taken in fp32 and divided by the sampling temperature before the softmax;
- log p(token t+1 | ..t) for t < T-1, then the last A of those, times `action_mask`.
The log-softmax is Megatron's vocab-parallel cross entropy: no rank ever holds [B, T, V].
Vocabulary padding (see `model.py`) is masked to -inf so padded rows take no probability.

Departures / limits:
- `policy_step` is one micro-batch and one optimizer step; gradient accumulation is
  `forward_backward` per micro-batch (loss scaled by 1 / steps) then `optimizer_step`;
- the optimizer is the caller's plain torch optimizer (AdamW on CPU): Megatron's
  distributed optimizer and its DDP grad buffers are not used (see `train_utils.py`), so
  data-parallel gradients are averaged here over `dp_group` before clipping;
- the entropy is computed vocab-parallel (three all-reduces over TP of [B, T] tensors)
  instead of OpenRLHF's full-vocabulary softmax;
- MoE aux loss, packed samples (`--ds.packing_samples`), ring attention and OpenRLHF's
  dynamic batching are not implemented yet: the caller refuses those flags with the
  Megatron backend.
"""

import dataclasses
from typing import Optional

import torch
import torch.distributed as dist


def check_right_padded(attention_mask: torch.Tensor) -> None:
    # Right padding <=> each row's mask never goes from 0 back to 1. Checked on the host copy
    # only: on a GPU tensor the `if` would be a device sync per micro-batch, so callers that
    # move batches to the GPU check them before (ray_actor.forward, fit.run_fit).
    if attention_mask.device.type != "cpu":
        return
    if (attention_mask[:, 1:] > attention_mask[:, :-1]).any():
        raise ValueError(
            "the Megatron actor expects right-padded rows (attention_mask a prefix of ones, as "
            "OpenRLHF 0.11's experiences are); got a row with padding before a real token"
        )


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # [B, T], exactly as `openrlhf.models.actor.Actor.forward` builds them.
    position_ids = attention_mask.long().cumsum(-1) - 1
    return position_ids.masked_fill_(attention_mask == 0, 1)


def _mask_padded_vocab(logits: torch.Tensor, vocab_size: Optional[int]) -> torch.Tensor:
    """-inf on the padded vocabulary rows this TP rank holds. logits: [B, T, V/tp]."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.utils import VocabUtility

    if vocab_size is None:
        return logits
    part = logits.size(-1)
    start, _ = VocabUtility.vocab_range_from_per_partition_vocab_size(
        part, ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
    )
    if start + part <= vocab_size:
        return logits
    padded = torch.arange(start, start + part, device=logits.device) >= vocab_size
    return logits.masked_fill(padded, float("-inf"))


def _scaled_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    # fp32 then / temperature: the policy the rollout sampled from, as `Actor.forward` does.
    logits = logits.float()
    return logits / temperature if temperature != 1.0 else logits


def _log_probs_from_logits(logits, sequences, action_mask, vocab_size):
    """Scaled logits [B, T, V/tp] -> action log-probs [B, A] (OpenRLHF's alignment).
    Megatron's vocab-parallel cross entropy reuses `logits`' memory: they are gone after."""
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    logits = _mask_padded_vocab(logits, vocab_size)
    targets = torch.roll(sequences, shifts=-1, dims=1)  # [B, T]: the token each position predicts
    log_probs = -vocab_parallel_cross_entropy(logits.contiguous(), targets)  # [B, T]
    # The last position predicts nothing (its target wrapped around): drop it, keep the last A.
    return log_probs[:, :-1][:, -action_mask.size(1) :] * action_mask.float()


def _vocab_parallel_entropy(logits: torch.Tensor, vocab_size: Optional[int]) -> torch.Tensor:
    """Entropy of softmax(logits) per position, [B, T], from scaled logits [B, T, V/tp].

    H = log S - sum_v e_v s_v / S with s = z - max(z), e = exp(s), S = sum_v e_v; the sums run
    over the TP shards with an all-reduce whose backward is the identity (every TP rank
    computes the same loss from the reduced sums). Padded vocabulary rows are sliced off
    (a -inf there would make 0 * -inf = nan in e * s)."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region

    if vocab_size is not None:
        start = ps.get_tensor_model_parallel_rank() * logits.size(-1)
        logits = logits[..., : max(0, min(logits.size(-1), vocab_size - start))]
    # The max only shifts for stability; it needs no gradient (H does not depend on it).
    if logits.size(-1):
        local_max = logits.detach().amax(-1)
    else:  # a rank holding only padding rows (a vocabulary smaller than tp * divisor)
        local_max = logits.new_full(logits.shape[:-1], float("-inf"))
    dist.all_reduce(local_max, op=dist.ReduceOp.MAX, group=ps.get_tensor_model_parallel_group())
    shifted = logits - local_max.unsqueeze(-1)
    exp = shifted.exp()
    sum_exp = reduce_from_tensor_model_parallel_region(exp.sum(-1))
    sum_exp_shifted = reduce_from_tensor_model_parallel_region((exp * shifted).sum(-1))
    return sum_exp.log() - sum_exp_shifted / sum_exp


def _pad_for_sequence_parallel(model, sequences, position_ids):
    """Sequence parallelism splits the sequence over TP ranks, so its length must be a
    multiple of tp: pad on the right (under the causal mask no real token sees the padding;
    its logits are sliced off again)."""
    from megatron.core import parallel_state as ps

    tp = ps.get_tensor_model_parallel_world_size()
    extra = -sequences.size(1) % tp if getattr(model.config, "sequence_parallel", False) else 0
    if extra:
        sequences = torch.nn.functional.pad(sequences, (0, extra))
        position_ids = torch.nn.functional.pad(position_ids, (0, extra), value=1)
    return sequences, position_ids


def _run_schedule(model, sequences, attention_mask, loss_func_factory, forward_only):
    """One micro-batch through Megatron's schedule (pipelined when pp > 1). Returns what the
    last stage's loss function reported (a list with one entry there, [] elsewhere), or the
    logits [B, T, V/tp] when `loss_func_factory` is None."""
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    check_right_padded(attention_mask)
    batch, seq_len = sequences.shape
    padded, position_ids = _pad_for_sequence_parallel(model, sequences, _position_ids(attention_mask))

    def forward_step(data_iterator, model):
        # attention_mask=None: Megatron applies its causal mask (right padding, see docstring).
        output = model(padded, position_ids, None)
        if ps.is_pipeline_last_stage() and output.size(1) != seq_len:
            output = output[:, :seq_len]  # logits of the sequence-parallel padding
        return output, (loss_func_factory() if loss_func_factory else None)

    return get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter([None]),
        model=[model],
        num_microbatches=1,
        seq_length=padded.size(1),
        micro_batch_size=batch,
        forward_only=forward_only,
    )


def _broadcast_from_last_stage(tensor: Optional[torch.Tensor], shape, dtype, device) -> torch.Tensor:
    """The last pipeline stage's tensor on every rank of its pipeline group."""
    from megatron.core import parallel_state as ps

    if ps.get_pipeline_model_parallel_world_size() == 1:
        return tensor
    tensor = torch.empty(shape, dtype=dtype, device=device) if tensor is None else tensor.contiguous()
    dist.broadcast(
        tensor,
        src=ps.get_pipeline_model_parallel_last_rank(),
        group=ps.get_pipeline_model_parallel_group(),
    )
    return tensor


@torch.no_grad()
def action_log_probs(
    model,
    sequences: torch.Tensor,
    attention_mask: torch.Tensor,
    action_mask: torch.Tensor,
    temperature: float = 1.0,
    vocab_size: Optional[int] = None,
) -> torch.Tensor:
    """log pi(a_t | s_t) of the action tokens, [B, A], on every rank of the model-parallel
    group (computed on the last pipeline stage, broadcast over the pipeline group).

    sequences / attention_mask: [B, T], right-padded; action_mask: [B, A] (A <= T - 1).
    vocab_size: the tokenizer's (HF) vocabulary when the model's is padded (`GPTSpec`
    `hf_vocab_size`); None when there is no padding."""
    model.eval()
    logits = _run_schedule(model, sequences, attention_mask, None, forward_only=True)
    log_probs = None
    if logits:
        scaled = _scaled_logits(logits[0], temperature)
        log_probs = _log_probs_from_logits(scaled, sequences, action_mask, vocab_size)
    return _broadcast_from_last_stage(log_probs, action_mask.shape, torch.float32, sequences.device)


def _average_dp_grads(model, dp_group) -> None:
    # gloo has no ReduceOp.AVG: sum, then divide. OpenRLHF's `dp_size` factor in the loss
    # (loss_batch_info) assumes exactly this averaging, as DeepSpeed does it.
    if dp_group is None or dist.get_world_size(dp_group) == 1:
        return
    from .train_utils import grad_of

    size = dist.get_world_size(dp_group)
    for param in model.parameters():
        grad = grad_of(param)
        if grad is not None:
            dist.all_reduce(grad, group=dp_group)
            grad.div_(size)


def _clip_grads(model, max_norm: float) -> torch.Tensor:
    """Scale gradients so their global (TP x PP) norm is at most max_norm; returns the norm
    before clipping (0-dim tensor). The same coefficient as `torch.nn.utils.clip_grad_norm_` /
    DeepSpeed, applied on the device: x * 1.0 is x exactly, so no host sync decides whether
    to scale."""
    from .train_utils import grad_norm_tensor, grad_of

    norm = grad_norm_tensor(model)
    if max_norm > 0:
        coef, by_dtype = (max_norm / (norm + 1e-6)).clamp(max=1.0), {}
        for grad in map(grad_of, model.parameters()):
            if grad is not None:
                if grad.dtype not in by_dtype:
                    by_dtype[grad.dtype] = coef.to(grad.dtype)
                grad.mul_(by_dtype[grad.dtype])
    return norm


@dataclasses.dataclass
class PolicyStepConfig:
    """The flags of OpenRLHF's `training_step` that shape the actor loss, by their meaning:
    temperature: `--rollout.temperature` (logits / T, as the rollout sampled);
    max_norm: gradient clipping (`--actor.max_norm`; 0 turns it off);
    vocab_size: the tokenizer's vocabulary when the model's is padded (`GPTSpec.hf_vocab_size`);
    kl_coef: the KL controller's current value when `--algo.kl.use_loss` (0: no KL loss),
      with `kl_estimator` / `kl_unbiased_gradient` from `--algo.kl.*`;
    entropy_coef: `--actor.entropy_coef` (None: entropy not computed; 0: computed, reported,
      not in the loss)."""

    temperature: float = 1.0
    max_norm: float = 1.0
    vocab_size: Optional[int] = None
    kl_coef: float = 0.0
    kl_estimator: str = "k1"
    kl_unbiased_gradient: bool = False
    entropy_coef: Optional[float] = None

    def stat_names(self) -> tuple:
        """What `policy_step` reports, in the order `_actor_loss` stacks it."""
        names = ["loss", "policy_loss", "clip_ratio", "ppo_kl"]
        if self.kl_coef > 0:
            names.append("kl")
        if self.entropy_coef is not None:
            names.append("entropy_loss")
        return tuple(names)


def _actor_loss(logits, experience, loss_fn, cfg: PolicyStepConfig, loss_batch_info: dict):
    """OpenRLHF's `training_step` loss on one micro-batch: policy loss + kl_coef * KL loss -
    entropy_coef * entropy. logits: [B, T, V/tp]. Returns (loss, stats [len(stat_names)])."""
    from openrlhf.models.loss import aggregate_loss
    from openrlhf.models.utils import compute_approx_kl

    action_mask = experience.action_mask
    logits = _scaled_logits(logits, cfg.temperature)
    entropy = None
    if cfg.entropy_coef is not None:
        # Before the log-probs: Megatron's cross entropy overwrites its input with the softmax.
        entropy = _vocab_parallel_entropy(logits, cfg.vocab_size)[:, :-1][:, -action_mask.size(1) :]
    log_probs = _log_probs_from_logits(logits, experience.sequences, action_mask, cfg.vocab_size)  # [B, A]
    policy_loss, clip_ratio, ppo_kl, _, _ = loss_fn(
        log_probs,
        experience.action_log_probs,
        experience.advantages,
        action_mask=action_mask,
        rollout_log_probs=getattr(experience, "rollout_log_probs", None),
        **loss_batch_info,
    )
    loss, stats = policy_loss, [policy_loss, clip_ratio, ppo_kl]
    if cfg.kl_coef > 0:
        kl = compute_approx_kl(
            log_probs,
            experience.base_action_log_probs,
            log_probs_old=experience.action_log_probs,
            kl_estimator=cfg.kl_estimator,
            unbiased_gradient=cfg.kl_unbiased_gradient,
        )
        kl_loss = aggregate_loss(kl, action_mask, **loss_batch_info)
        loss = loss + cfg.kl_coef * kl_loss
        stats.append(kl_loss)
    if entropy is not None:
        entropy_loss = aggregate_loss(entropy, action_mask, **loss_batch_info)
        if cfg.entropy_coef != 0:
            loss = loss - cfg.entropy_coef * entropy_loss
        stats.append(entropy_loss)
    return loss, torch.stack([loss.detach()] + [x.detach() for x in stats]).float()


def forward_backward(model, experience, loss_fn, cfg: PolicyStepConfig, loss_batch_info=None, loss_scale=1.0):
    """Forward and backward of one micro-batch; gradients accumulate into `.grad` (the
    caller zeroes them at the start of an optimizer step). The backpropagated loss is
    multiplied by `loss_scale` (1 / gradient-accumulation steps, as DeepSpeed does: OpenRLHF's
    global-window `loss_batch_info` pre-compensates exactly that). Returns the unscaled
    stats [len(cfg.stat_names())] on every rank."""
    model.train()

    def loss_func_factory():
        def loss_func(logits):  # [B, T, V/tp], last stage only
            loss, stats = _actor_loss(logits, experience, loss_fn, cfg, loss_batch_info or {})
            return loss * loss_scale if loss_scale != 1.0 else loss, {"stats": stats}

        return loss_func

    sequences = experience.sequences
    out = _run_schedule(model, sequences, experience.attention_mask, loss_func_factory, forward_only=False)
    stats = out[0]["stats"] if out else None  # last stage only
    return _broadcast_from_last_stage(stats, (len(cfg.stat_names()),), torch.float32, sequences.device)


def optimizer_step(model, optimizer, max_norm: float, dp_group=None) -> torch.Tensor:
    """Finish the accumulated gradients (tied-embedding sum over PP, DP average), clip them
    by their global TP x PP norm and step. Returns the norm before clipping, a 0-dim tensor
    on the model's device (read it once per training step, not per optimizer step)."""
    from .train_utils import allreduce_tied_embedding_grads

    allreduce_tied_embedding_grads(model)
    _average_dp_grads(model, dp_group)
    norm = _clip_grads(model, max_norm)
    optimizer.step()
    return norm


def policy_step(
    model,
    optimizer: torch.optim.Optimizer,
    experience,
    loss_fn,
    cfg: Optional[PolicyStepConfig] = None,
    loss_batch_info: Optional[dict] = None,
    dp_group=None,
) -> dict:
    """One actor update on one micro-batch, as OpenRLHF's `training_step` does it.

    experience: anything with OpenRLHF `Experience`'s fields `sequences`, `attention_mask`
      [B, T], `action_mask`, `action_log_probs` (old), `advantages` [B, A], and
      `rollout_log_probs` (IS correction) / `base_action_log_probs` (KL loss) when those are
      on (an `Experience` itself works).
    loss_fn: OpenRLHF's `PolicyLoss`, built from the flags as `ActorPPOTrainer` builds it.
    loss_batch_info: `get_loss_batch_info(...)`'s dict (dp_size, global token / sample
      counts) for a loss normalised over the whole DP batch; None: this micro-batch's mean.
    cfg: the loss / clipping flags (None: PolicyStepConfig's defaults).
    dp_group: the data-parallel group whose gradients are averaged before clipping.
    Returns `cfg.stat_names()` -> value ("loss" is what was backpropagated) and "grad_norm"
    (before clipping), on every rank."""
    cfg = cfg or PolicyStepConfig()
    optimizer.zero_grad(set_to_none=True)
    stats = forward_backward(model, experience, loss_fn, cfg, loss_batch_info)
    norm = optimizer_step(model, optimizer, cfg.max_norm, dp_group)
    return {**dict(zip(cfg.stat_names(), stats.tolist())), "grad_norm": float(norm)}
