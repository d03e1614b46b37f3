"""The Megatron actor's optimizer step is skipped, on every rank, when a
window's loss or gradients are not finite; the skip is counted and the LR schedule waits.

`run_fit` runs for real on a one-process gloo group; only the Megatron forward/backward and
the clipped step are replaced by a 2-parameter stand-in (actor_ops is tested elsewhere).
"""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from openrlhf_speed.backends.megatron import actor_ops, fit


@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    if not dist.is_initialized():
        store = tmp_path_factory.mktemp("gloo") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield dist.group.WORLD


class Exp:
    """A micro-batch of one sample whose loss is `scale * sum(w)` (scale may be NaN)."""

    def __init__(self, scale):
        self.scale = scale
        self.action_mask = torch.ones(1, 3)
        self.attention_mask = torch.ones(1, 4)
        self.info = {}

    def to_device(self, device):
        return self


class Buffer(list):
    sample_batch_size = 1

    @staticmethod
    def collate_fn(items):
        return items[0]


def _forward_backward(model, experience, loss_fn, cfg, info, scale):
    loss = experience.scale * model.weight.sum()
    (loss * scale).backward()
    return torch.tensor([loss.item(), loss.item()] + [0.0] * (len(cfg.stat_names()) - 2))  # loss, policy_loss, ...


def _optimizer_step(model, optimizer, max_norm, dp_group=None):
    optimizer.step()
    return 1.0


def _actor(scales):
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    args = SimpleNamespace(
        train=SimpleNamespace(batch_size=1, micro_batch_size=1, max_epochs=1, seed=0),
        algo=SimpleNamespace(kl=SimpleNamespace(use_loss=False, init_coef=0.0, estimator="k1", unbiased_gradient=False)),
        rollout=SimpleNamespace(temperature=1.0),
        actor=SimpleNamespace(max_norm=1.0, entropy_coef=None),
    )
    return SimpleNamespace(
        args=args, dp_group=dist.group.WORLD, model=model, optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0), loss_fn=None,
        spec=SimpleNamespace(hf_vocab_size=None), replay_buffer=Buffer(Exp(s) for s in scales), fits=0,
    )


def test_nan_window_skips_the_step_and_counts_it(gloo, monkeypatch):
    monkeypatch.setattr(actor_ops, "forward_backward", _forward_backward)
    monkeypatch.setattr(actor_ops, "optimizer_step", _optimizer_step)
    # gas = 1: three windows, one of them NaN. Each finite step (scale 1) takes SGD
    # w <- w - 0.1 * 1 per weight: 1.0 -> 0.9 -> 0.8; the NaN window changes nothing.
    actor = _actor([1.0, math.nan, 1.0])
    status = fit.run_fit(actor, kl_ctl=0.0)
    assert torch.allclose(actor.model.weight, torch.full((1, 2), 0.8))
    assert status["actor_nonfinite_steps_skipped"] == 1.0
    assert actor.scheduler.last_epoch == 2  # stepped for the two finite windows only
    assert math.isnan(status["policy_loss"])  # the NaN loss is reported, not hidden


def test_inf_gradient_with_finite_loss_is_caught(gloo, monkeypatch):
    def inf_grad(model, experience, loss_fn, cfg, info, scale):
        stats = _forward_backward(model, experience, loss_fn, cfg, info, scale)
        if experience.scale == 2.0:
            model.weight.grad[0, 0] = math.inf
        return stats

    monkeypatch.setattr(actor_ops, "forward_backward", inf_grad)
    monkeypatch.setattr(actor_ops, "optimizer_step", _optimizer_step)
    actor = _actor([2.0])
    status = fit.run_fit(actor, kl_ctl=0.0)
    assert torch.equal(actor.model.weight, torch.ones(1, 2)) and status["actor_nonfinite_steps_skipped"] == 1.0
