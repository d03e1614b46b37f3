"""OpenRLHF's DeepSpeed strategy, wrapped by `finite_guard.install`, never
backpropagates a NaN/inf loss and stops on a non-finite gradient norm after a step.
(DeepSpeed in bf16/fp32 steps NaN gradients into the weights; there was no guard.)"""

import math

import pytest
import torch

from openrlhf_speed.rollout import finite_guard


class FakeStrategy:
    def __init__(self):
        self.calls, self.norm = [], 1.0

    def backward(self, loss, model, optimizer, **kwargs):
        self.calls.append(("backward", float(loss)))

    def optimizer_step(self, optimizer, model, scheduler, name="model", **kwargs):
        self.calls.append(("step", name))

    def get_grad_norm(self, model):
        return self.norm


def test_finite_losses_pass_through():
    s = FakeStrategy()
    finite_guard.install(s)
    finite_guard.install(s)  # idempotent: wrapped once
    s.backward(torch.tensor(0.5), None, None)
    s.optimizer_step(None, None, None, name="actor")
    assert s.calls == [("backward", 0.5), ("step", "actor")]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_loss_stops_before_backward(bad):
    s = FakeStrategy()
    finite_guard.install(s)
    with pytest.raises(finite_guard.NonFiniteTrainingError, match="before backward"):
        s.backward(torch.tensor(bad), None, None)
    assert s.calls == []


def test_non_finite_grad_norm_stops_after_the_step():
    s = FakeStrategy()
    finite_guard.install(s)
    s.norm = float("nan")
    with pytest.raises(finite_guard.NonFiniteTrainingError, match="before these weights reach vLLM"):
        s.optimizer_step(None, None, None, name="actor")
    s2 = FakeStrategy()
    finite_guard.install(s2)
    s2.norm = None  # DeepSpeed has no norm before its first boundary step
    s2.optimizer_step(None, None, None)
