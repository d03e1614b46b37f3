"""`train_utils`: fp32 master weights for bf16 parameters, and the optimizer's groups."""

import pytest
import torch

from openrlhf_speed.backends.megatron.train_utils import MasterWeightsAdamW, make_optimizer


def _steps(optimizer, param, n=20):
    for _ in range(n):
        optimizer.zero_grad()
        param.sum().backward()  # gradient 1 everywhere (through autograd: the hooks fire)
        optimizer.step()


def test_master_weights_keep_updates_below_bf16_resolution():
    # bf16 has 8 mantissa bits: at 1.0 its step is 2^-7 = 0.0078, so 20 AdamW steps of
    # lr 1e-4 (-0.002 in all) vanish in a bf16 parameter but not in the fp32 master copy.
    plain = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    _steps(torch.optim.AdamW([plain], lr=1e-4, weight_decay=0.0), plain)
    assert torch.equal(plain.data, torch.ones(4, dtype=torch.bfloat16))  # the updates were lost

    param = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = MasterWeightsAdamW([{"params": [param], "weight_decay": 0.0}], lr=1e-4)
    _steps(opt, param)
    master = opt.inner.param_groups[0]["params"][0]
    assert master.dtype == torch.float32
    assert master[0].item() == pytest.approx(1 - 20 * 1e-4, rel=1e-4)
    assert param.dtype == torch.bfloat16 and torch.equal(param.data, master.to(torch.bfloat16))


def test_micro_batch_gradients_accumulate_in_fp32():
    # 1 + 255 x 0.001: each bf16 sum rounds back to 1.0 (resolution 2^-7 at 1), fp32 keeps 1.255.
    param = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    opt = MasterWeightsAdamW([{"params": [param], "weight_decay": 0.0}], lr=1e-3)
    opt.zero_grad()
    param.sum().backward()
    for _ in range(255):
        (param * 0.001).sum().backward()
    assert param.grad is None and param.main_grad.dtype == torch.float32
    assert param.main_grad[0].item() == pytest.approx(1.255, rel=1e-3)
    plain = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    plain.sum().backward()
    for _ in range(255):
        (plain * 0.001).sum().backward()
    assert plain.grad[0].item() == 1.0  # what bf16 accumulation would have trained on


def test_master_weights_state_round_trip():
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    opt = MasterWeightsAdamW([{"params": [param], "weight_decay": 0.0}], lr=1e-3)
    _steps(opt, param, 3)
    state = opt.state_dict()
    other = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    opt2 = MasterWeightsAdamW([{"params": [other], "weight_decay": 0.0}], lr=1e-3)
    opt2.load_state_dict(state)
    _steps(opt, param, 1)
    _steps(opt2, other, 1)
    assert torch.equal(param.data, other.data)
    assert torch.equal(opt.inner.param_groups[0]["params"][0], opt2.inner.param_groups[0]["params"][0])


def test_make_optimizer_exempts_biases_and_norms_from_decay():
    model = torch.nn.ModuleDict({"linear_qkv": torch.nn.Linear(2, 2), "input_layernorm": torch.nn.LayerNorm(2)})
    opt = make_optimizer(model, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, master_weights=False)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and [p.shape for p in decay["params"]] == [torch.Size([2, 2])]
    assert no_decay["weight_decay"] == 0.0 and len(no_decay["params"]) == 3  # bias, norm weight, norm bias
    assert isinstance(make_optimizer(model, 1e-3, (0.9, 0.95), 1e-8, 0.1, master_weights=True), MasterWeightsAdamW)


def test_all_finite_checks_losses_and_gradients():
    from openrlhf_speed.backends.megatron.train_utils import all_finite

    model = torch.nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    assert all_finite(model, torch.tensor([0.5, 1.0]))
    assert not all_finite(model, torch.tensor([0.5, float("nan")]))
    model.weight.grad[0, 1] = float("inf")
    assert not all_finite(model, torch.tensor([0.5]))
    # bf16 parameters with fp32 master gradients: `main_grad` is the one checked.
    param = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    opt = MasterWeightsAdamW([{"params": [param], "weight_decay": 0.0}], lr=1e-3)
    (param * float("nan")).sum().backward()
    holder = torch.nn.Module()
    holder.p = param
    assert param.grad is None and not all_finite(holder, torch.tensor([0.0]))
    opt.zero_grad()
