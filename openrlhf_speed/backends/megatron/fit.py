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

Host syncs: token counts, infos and the right-padding check come from each micro-batch's host
copy before it moves to the GPU; losses, stats and gradient norms stay on the device and are
read once, at the end of the training step. The non-finite verdict (one flag per optimizer
step) is the only other read.

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


def _host_view(experience) -> dict:
    """What the loss normalisation and the metrics read from a micro-batch, taken from its host
    copy before `to_device` moves it (in place): no device sync per micro-batch."""
    actor_ops.check_right_padded(experience.attention_mask)
    mask = experience.action_mask
    info = {}
    for key, value in experience.info.items():
        if isinstance(value, torch.Tensor) and value.numel():
            info[key] = float(value.float().mean())
        elif isinstance(value, list) and value and isinstance(value[0], (int, float)):
            info[key] = sum(value) / len(value)
    return {"tokens": float(mask.sum()), "samples": float(mask.shape[0]),
            "rows_with_actions": float((mask.reshape(mask.shape[0], -1).sum(-1) > 0).sum()), "info": info}


def _window_loss_info(views, dp_group, gas: int, device) -> dict:
    """The window's global token and sample counts (from `_host_view`s), summed over the DP group."""
    totals = torch.tensor([sum(v["tokens"] for v in views), sum(v["rows_with_actions"] for v in views)],
                          dtype=torch.float64).to(device)
    dist.all_reduce(totals, group=dp_group)
    return {
        "dp_size": dist.get_world_size(dp_group),
        "batch_num_tokens": (totals[0] / gas).float(),
        "global_batch_size": (totals[1] / gas).float(),
    }


class _Metrics:
    """Sums of value x weight and of the weights, reduced over the DP group at the end.
    Values may be device tensors: they are kept as they are and read in one transfer by
    `reduced`, so a training step syncs with the device once, not once per micro-batch."""

    def __init__(self):
        self.items, self.last = [], {}  # items: (name, value, weight)

    def add(self, name, value, weight) -> None:
        self.items.append((name, value, weight))

    @staticmethod
    def _floats(values: list) -> list:
        """Python floats of a list of floats and 0-dim tensors, with one device-to-host copy."""
        where = [i for i, v in enumerate(values) if torch.is_tensor(v)]
        out = list(values)
        if where:
            device = values[where[0]].device
            read = torch.stack([values[i].detach().double().to(device).reshape(()) for i in where]).tolist()
            for i, v in zip(where, read):
                out[i] = v
        return [float(v) for v in out]

    def reduced(self, dp_group) -> dict:
        last_names = sorted(self.last)
        values = self._floats([v for _, v, _ in self.items] + [self.last[n] for n in last_names])
        last = dict(zip(last_names, values[len(self.items):]))
        sums, weights = {}, {}
        for (name, _, weight), value in zip(self.items, values):
            sums[name] = sums.get(name, 0.0) + value * weight
            weights[name] = weights.get(name, 0.0) + weight
        names = sorted(sums)
        if not names:
            return last
        packed = torch.tensor([[sums[n], weights[n]] for n in names], dtype=torch.float64)
        if torch.cuda.is_available():
            packed = packed.cuda()
        dist.all_reduce(packed, group=dp_group)
        out = {n: (s / w if w else 0.0) for n, (s, w) in zip(names, packed.tolist())}
        out.update(last)
        return out


# Stats that `aggregate_loss` normalises by the window's global counts: their sum over the
# window's micro-batches / gas, averaged over DP ranks, is the window's global mean. The
# others (PolicyLoss's clip ratio and ratio-KL) are per-micro-batch means, token-weighted.
_WINDOW_SUMMED = ("policy_loss", "kl", "entropy_loss")
_RENAMES = {"clip_ratio": "ppo_clip_ratio"}


def _record(metrics: _Metrics, window_sums: dict, stats: dict, view: dict, gas: int) -> None:
    """stats: name -> 0-dim tensor (on the device); view: the micro-batch's `_host_view`."""
    for key, value in stats.items():
        if key in _WINDOW_SUMMED:
            # float64, as the Python floats this sum used to be (the reported mean, not the loss)
            window_sums[key] = window_sums.get(key, 0.0) + (value.double() if torch.is_tensor(value) else value) / gas
        elif key != "loss":
            metrics.add(_RENAMES.get(key, key), value, view["tokens"])
    for key, value in view["info"].items():
        if key not in stats:  # the actor's own value wins (e.g. `kl`: OpenRLHF's training_step overwrites it too)
            metrics.add(key, value, view["samples"])


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
    generator = torch.Generator().manual_seed(args.train.seed * 1000 + actor.fits)
    metrics = _Metrics()
    skipped = 0  # optimizer steps skipped by the non-finite guard
    for _ in range(args.train.max_epochs):
        loader = DataLoader(buffer, batch_size=buffer.sample_batch_size, shuffle=True, generator=generator,
                            drop_last=True, collate_fn=buffer.collate_fn)
        batches = list(loader)
        for start in range(0, len(batches), gas):
            views = [_host_view(exp) for exp in batches[start : start + gas]]
            window = [exp.to_device(device) for exp in batches[start : start + gas]]
            info = _window_loss_info(views, dp_group, gas, device)
            actor.optimizer.zero_grad(set_to_none=True)
            window_sums, losses = {}, []
            for experience, view in zip(window, views):
                stats = actor_ops.forward_backward(actor.model, experience, actor.loss_fn, cfg, info, 1.0 / gas)
                losses.append(stats[0])
                _record(metrics, window_sums, dict(zip(names, stats.unbind())), view, gas)
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
    release = getattr(actor.optimizer, "release_grads", None)  # free main_grad buffers until the next step
    if release:
        release()
    metrics.last["actor_nonfinite_steps_skipped"] = float(skipped)
    if skipped:
        print(f"[openrlhf-speed] WARNING: {skipped} optimizer step(s) skipped this training step: non-finite "
              "loss or gradients (see actor_nonfinite_steps_skipped)", flush=True)
    return metrics.reduced(dp_group)
