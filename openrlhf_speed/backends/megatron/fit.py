"""`MegatronPolicyActor.fit`: OpenRLHF's `ppo_train` loop around `actor_ops`.

The same optimisation as OpenRLHF's DeepSpeed actor, step for step:
- --train.max_epochs passes over the replay buffer in micro-batches of
  --train.micro_batch_size; one optimizer step per window of
  gas = train batch / (micro batch x dp) micro-batches (DeepSpeed's gradient accumulation);
- every micro-batch of a window carries the window's global token and sample counts
  (summed over the window and the DP group, divided by gas: OpenRLHF's
  `iter_grad_accum_global_norm`), and its loss is scaled by 1 / gas as DeepSpeed scales it,
  so the update is one token (or sequence) mean over the whole window and all DP ranks;
- the LR scheduler steps once per optimizer step; KL loss with the controller's `kl_ctl`
  when --algo.kl.use_loss, the entropy term when --actor.entropy_coef is set.
The order of micro-batches is shuffled with a seed every rank shares (a replica's ranks must
see the same micro-batch at the same time; OpenRLHF shuffles only without model parallelism).

Non-finite guard: before each optimizer step every rank checks the window's losses and its
gradients (`train_utils.all_finite`, one collective verdict). A NaN or inf anywhere skips
that optimizer step and its LR-scheduler step on all ranks (the gradients are dropped) and
is counted in `actor_nonfinite_steps_skipped`; the window's losses still enter the averaged
status, so a NaN shows in `policy_loss` instead of being hidden.

Returned status: OpenRLHF's keys (`policy_loss`, `actor_lr`, `actor_grad_norm`, `kl`,
`entropy_loss`, `ppo_clip_ratio`, `ppo_kl`, and the experiences' `info` such as `reward`
and `response_length`), averaged over the DP group. One departure: `policy_loss`, `kl` and
`entropy_loss` are each optimizer step's global mean (what was optimised), averaged over
steps; OpenRLHF token-averages the micro-batches' window-normalised values, which changes
with the micro-batch size under gradient accumulation.
"""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from . import actor_ops
from .train_utils import all_finite


def _window_loss_info(window, dp_group, gas: int) -> dict:
    masks = [exp.action_mask for exp in window]
    totals = torch.tensor(
        [sum(float(m.sum()) for m in masks), sum(float((m.reshape(m.shape[0], -1).sum(-1) > 0).sum()) for m in masks)],
        dtype=torch.float64, device=masks[0].device,
    )
    dist.all_reduce(totals, group=dp_group)
    return {
        "dp_size": dist.get_world_size(dp_group),
        "batch_num_tokens": (totals[0] / gas).float(),
        "global_batch_size": (totals[1] / gas).float(),
    }


class _Metrics:
    """Sums of value x weight and of the weights, reduced over the DP group at the end."""

    def __init__(self):
        self.sums, self.weights, self.last = {}, {}, {}

    def add(self, name, value, weight) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(value) * weight
        self.weights[name] = self.weights.get(name, 0.0) + weight

    def reduced(self, dp_group) -> dict:
        names = sorted(self.sums)
        if not names:
            return dict(self.last)
        packed = torch.tensor([[self.sums[n], self.weights[n]] for n in names], dtype=torch.float64)
        if torch.cuda.is_available():
            packed = packed.cuda()
        dist.all_reduce(packed, group=dp_group)
        out = {n: (s / w if w else 0.0) for n, (s, w) in zip(names, packed.tolist())}
        out.update(self.last)
        return out


# Stats that `aggregate_loss` normalises by the window's global counts: their sum over the
# window's micro-batches / gas, averaged over DP ranks, is the window's global mean. The
# others (PolicyLoss's clip ratio and ratio-KL) are per-micro-batch means, token-weighted.
_WINDOW_SUMMED = ("policy_loss", "kl", "entropy_loss")
_RENAMES = {"clip_ratio": "ppo_clip_ratio"}


def _record(metrics: _Metrics, window_sums: dict, stats: dict, experience, gas: int) -> None:
    n_tokens = float(experience.action_mask.sum())
    n_samples = float(experience.action_mask.shape[0])
    for key, value in stats.items():
        if key in _WINDOW_SUMMED:
            window_sums[key] = window_sums.get(key, 0.0) + value / gas
        elif key != "loss":
            metrics.add(_RENAMES.get(key, key), value, n_tokens)
    for key, value in experience.info.items():
        if key in stats:  # the actor's own value (e.g. `kl`: OpenRLHF's training_step overwrites it too)
            continue
        if isinstance(value, torch.Tensor) and value.numel():
            metrics.add(key, value.float().mean(), n_samples)
        elif isinstance(value, list) and value and isinstance(value[0], (int, float)):
            metrics.add(key, sum(value) / len(value), n_samples)


def run_fit(actor, kl_ctl: float) -> dict:
    args = actor.args
    dp_group = actor.dp_group
    dp_size = dist.get_world_size(dp_group)
    gas = max(1, args.train.batch_size // (args.train.micro_batch_size * dp_size))
    kl_on = args.algo.kl.use_loss and args.algo.kl.init_coef > 0
    cfg = actor_ops.PolicyStepConfig(
        temperature=args.rollout.temperature,
        max_norm=args.actor.max_norm,
        vocab_size=actor.spec.hf_vocab_size,
        kl_coef=float(kl_ctl) if kl_on else 0.0,
        kl_estimator=args.algo.kl.estimator,
        kl_unbiased_gradient=args.algo.kl.unbiased_gradient,
        entropy_coef=args.actor.entropy_coef,
    )
    names = cfg.stat_names()
    device = next(actor.model.parameters()).device
    buffer = actor.replay_buffer
    generator = torch.Generator().manual_seed(args.train.seed * 1000 + actor._fits)
    metrics = _Metrics()
    skipped = 0  # optimizer steps skipped by the non-finite guard
    for _ in range(args.train.max_epochs):
        loader = DataLoader(buffer, batch_size=buffer.sample_batch_size, shuffle=True, generator=generator,
                            drop_last=True, collate_fn=buffer.collate_fn)
        batches = list(loader)
        for start in range(0, len(batches), gas):
            window = [exp.to_device(device) for exp in batches[start : start + gas]]
            info = _window_loss_info(window, dp_group, gas)
            actor.optimizer.zero_grad(set_to_none=True)
            window_sums, losses = {}, []
            for experience in window:
                stats = actor_ops.forward_backward(actor.model, experience, actor.loss_fn, cfg, info, 1.0 / gas)
                losses.append(stats[0])
                _record(metrics, window_sums, dict(zip(names, stats.tolist())), experience, gas)
            for key, value in window_sums.items():
                metrics.add(key, value, 1.0)
            metrics.last["actor_lr"] = actor.scheduler.get_last_lr()[0]
            if not all_finite(actor.model, torch.stack(losses)):
                actor.optimizer.zero_grad(set_to_none=True)
                skipped += 1
                metrics.last["actor_grad_norm"] = float("nan")
                continue
            norm = actor_ops.optimizer_step(actor.model, actor.optimizer, cfg.max_norm, dp_group)
            actor.scheduler.step()
            metrics.last["actor_grad_norm"] = norm
    metrics.last["actor_nonfinite_steps_skipped"] = float(skipped)
    if skipped:
        print(f"[openrlhf-speed] WARNING: {skipped} optimizer step(s) skipped this training step: non-finite "
              "loss or gradients (see actor_nonfinite_steps_skipped)", flush=True)
    return metrics.reduced(dp_group)
