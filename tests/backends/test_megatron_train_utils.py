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


class _FusedWgradLinear(torch.autograd.Function):
    """What Megatron's gradient_accumulation_fusion does in the weight-gradient GEMM: add the
    gradient into `weight.main_grad` (fp32) and hand autograd no weight gradient."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        weight.main_grad.add_((grad_out.t() @ x).float())
        return grad_out @ weight, None


def test_fused_weight_gradients_accumulate_like_the_hook():
    torch.manual_seed(0)
    xs = [torch.randn(3, 4, dtype=torch.bfloat16) for _ in range(2)]
    start = torch.randn(2, 4).to(torch.bfloat16)
    results = {}
    for fused in (False, True):
        weight, norm = torch.nn.Parameter(start.clone()), torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
        opt = MasterWeightsAdamW([{"params": [weight, norm], "weight_decay": 0.0}], fused_wgrad=fused, lr=1e-2)
        opt.zero_grad()
        if fused:  # the buffers exist, zeroed, before the first backward
            assert torch.equal(weight.main_grad, torch.zeros(2, 4))
        for x in xs:  # two micro-batches
            out = _FusedWgradLinear.apply(x * norm, weight) if fused else (x * norm) @ weight.t()
            out.float().pow(2).sum().backward()
        results[fused] = (weight.main_grad.clone(), norm.main_grad.clone())
        opt.step()
        results[fused] += (weight.detach().clone(),)
        opt.release_grads()
        assert weight.main_grad is None and norm.main_grad is None
    for a, b in zip(results[False], results[True]):
        assert torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)


def test_fused_weight_gradients_need_master_weights():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="master weights"):
        make_optimizer(model, 1e-3, (0.9, 0.95), 1e-8, 0.0, master_weights=False, fused_wgrad=True)


# Fusions (model.fusion_flags): all off on CPU; on GPU those whose kernels are there.
NO_KERNELS = {"te": False, "apex_softmax": False, "apex_wgrad": False}


def test_fusions_are_off_on_cpu():
    from openrlhf_speed.backends.megatron.model import fusion_flags

    flags = fusion_flags(False, {"te": True, "apex_softmax": True, "apex_wgrad": True}, master_weights=True, use_te=True)
    assert not any(flags.values())


@pytest.mark.parametrize("kernels, master, use_te, on", [
    (NO_KERNELS, True, False, {"bias_activation_fusion", "bias_dropout_fusion"}),
    ({**NO_KERNELS, "te": True}, True, True,
     {"bias_activation_fusion", "bias_dropout_fusion", "apply_rope_fusion", "gradient_accumulation_fusion"}),
    ({**NO_KERNELS, "te": True}, False, True, {"bias_activation_fusion", "bias_dropout_fusion", "apply_rope_fusion"}),
    ({"te": False, "apex_softmax": True, "apex_wgrad": True}, True, False,
     {"bias_activation_fusion", "bias_dropout_fusion", "masked_softmax_fusion", "gradient_accumulation_fusion"}),
])
def test_gpu_fusions_follow_the_kernels(kernels, master, use_te, on):
    from openrlhf_speed.backends.megatron.model import fusion_flags

    flags = fusion_flags(True, kernels, master_weights=master, use_te=use_te)
    assert {name for name, value in flags.items() if value} == on


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_gpu_fusion_flags_pass_megatrons_config_checks(arch):
    """The GPU set (without TE, which this machine lacks) is one Megatron's TransformerConfig
    accepts for these models (SwiGLU, no linear bias; Qwen2's QKV bias)."""
    pytest.importorskip("megatron.core")
    from transformers import LlamaConfig, Qwen2Config

    from openrlhf_speed.backends.megatron.model import fusion_flags, gpt_config_from_hf

    common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5)
    hf = LlamaConfig(**common) if arch == "llama" else Qwen2Config(**common)
    flags = fusion_flags(True, {**NO_KERNELS, "apex_wgrad": True, "apex_softmax": True}, master_weights=True,
                         use_te=False)
    config, _ = gpt_config_from_hf(hf, params_dtype=torch.bfloat16, use_te=False, **flags)
    assert config.bias_activation_fusion and config.gradient_accumulation_fusion and config.masked_softmax_fusion
    cpu_config, _ = gpt_config_from_hf(hf, use_te=False)  # this CPU machine: every fusion off
    assert not (cpu_config.bias_activation_fusion or cpu_config.gradient_accumulation_fusion)
