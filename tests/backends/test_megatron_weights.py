"""HF <-> Megatron weight layout, config mapping and CPU shims, in one process (no ranks).

The layouts are checked by hand on tensors whose entries name themselves, then every
(TP, PP) split is merged back and compared bit for bit with the HF tensors.
"""

import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from openrlhf_speed.backends.megatron.weights import (
    WeightLayout,
    hf_to_megatron,
    megatron_to_hf,
    merge_tp_shards,
)


def tiny(arch="qwen2", **kw):
    cfg = dict(
        vocab_size=130, hidden_size=8, intermediate_size=12, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=2,
    )
    cfg.update(kw)
    return (Qwen2Config if arch == "qwen2" else LlamaConfig)(**cfg)


def hf_state(cfg):
    """Random HF state dict with the shapes of `cfg` (Qwen2: QKV biases)."""
    g = torch.Generator().manual_seed(0)
    h, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, h), "model.norm.weight": (h,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
            p + "mlp.down_proj.weight": (h, f),
        })
        if cfg.model_type == "qwen2":
            for proj, rows in (("q", q), ("k", kv), ("v", kv)):
                shapes[p + f"self_attn.{proj}_proj.bias"] = (rows,)
    return {k: torch.randn(s, generator=g) for k, s in shapes.items()}


def test_qkv_layout_interleaves_query_groups_and_splits_whole_groups():
    # 4 query heads in 2 KV groups, head_dim 1, hidden 1: entries name the head.
    cfg = tiny(hidden_size=1, head_dim=1, num_hidden_layers=1)
    state = hf_state(cfg)
    state["model.layers.0.self_attn.q_proj.weight"] = torch.tensor([[10.0], [11.0], [12.0], [13.0]])
    state["model.layers.0.self_attn.k_proj.weight"] = torch.tensor([[20.0], [21.0]])
    state["model.layers.0.self_attn.v_proj.weight"] = torch.tensor([[30.0], [31.0]])
    name = "decoder.layers.0.self_attention.linear_qkv.weight"
    full = hf_to_megatron(state, WeightLayout.from_hf(cfg), 0, 0)[name]
    # group 0: q0 q1 k0 v0 | group 1: q2 q3 k1 v1
    assert full.flatten().tolist() == [10, 11, 20, 30, 12, 13, 21, 31]
    rank1 = hf_to_megatron(state, WeightLayout.from_hf(cfg, tp_size=2), 1, 0)[name]
    assert rank1.flatten().tolist() == [12, 13, 21, 31]


def test_fc1_layout_is_gate_then_up_per_tp_rank():
    cfg = tiny(hidden_size=1, intermediate_size=4, num_hidden_layers=1)
    state = hf_state(cfg)
    state["model.layers.0.mlp.gate_proj.weight"] = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    state["model.layers.0.mlp.up_proj.weight"] = torch.tensor([[5.0], [6.0], [7.0], [8.0]])
    layout = WeightLayout.from_hf(cfg, tp_size=2)
    shards = [hf_to_megatron(state, layout, r, 0)["decoder.layers.0.mlp.linear_fc1.weight"] for r in (0, 1)]
    assert [s.flatten().tolist() for s in shards] == [[1, 2, 5, 6], [3, 4, 7, 8]]
    assert merge_tp_shards("fc1", shards).flatten().tolist() == [1, 2, 3, 4, 5, 6, 7, 8]


def test_stage_layers_are_numbered_locally_and_own_embedding_norm_head():
    cfg = tiny(tie_word_embeddings=False)
    layout = WeightLayout.from_hf(cfg, pp_size=2)
    first, last = (hf_to_megatron(hf_state(cfg), layout, 0, s) for s in (0, 1))
    assert "embedding.word_embeddings.weight" in first and "output_layer.weight" not in first
    assert "decoder.final_layernorm.weight" in last and "output_layer.weight" in last
    assert {k.split(".")[2] for k in last if k.startswith("decoder.layers.")} == {"0", "1"}
    stage1 = dict((mg, hf) for mg, _, hf in layout.stage_params(1))
    assert stage1["decoder.layers.0.input_layernorm.weight"] == ("model.layers.2.input_layernorm.weight",)


@pytest.mark.parametrize("arch,tied", [("qwen2", False), ("llama", True), ("llama", False)])
@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (2, 2), (1, 4)])
def test_split_and_merge_reproduce_every_hf_tensor(arch, tied, tp, pp):
    cfg = tiny(arch, tie_word_embeddings=tied)
    state = hf_state(cfg)
    layout = WeightLayout.from_hf(cfg, tp_size=tp, pp_size=pp)
    assert layout.padded_vocab_size == -(-130 // tp) * tp
    back = {}
    for stage in range(pp):
        ranks = [hf_to_megatron(state, layout, r, stage) for r in range(tp)]
        for mg_name, kind, hf_names in layout.stage_params(stage):
            if kind == "tied_copy":
                continue
            merged = merge_tp_shards(kind, [r[mg_name] for r in ranks])
            assert merged.shape == layout.merged_shape(mg_name, kind)
            back.update(megatron_to_hf(kind, merged, hf_names, layout))
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_padded_vocab_rows_are_zero():
    cfg = tiny("llama", tie_word_embeddings=True)
    layout = WeightLayout.from_hf(cfg, tp_size=4)
    last = hf_to_megatron(hf_state(cfg), layout, 3, 0)["embedding.word_embeddings.weight"]
    assert layout.padded_vocab_size == 132 and last.shape[0] == 33
    assert torch.count_nonzero(last[-2:]) == 0


def test_config_from_smollm2_like_hf_config():
    from openrlhf_speed.backends.megatron.model import gpt_config_from_hf

    smol = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5,
        tie_word_embeddings=True, rope_parameters={"rope_theta": 100000.0, "rope_type": "default"},
    )
    config, spec = gpt_config_from_hf(smol, tp_size=3)
    assert (config.num_attention_heads, config.num_query_groups, config.kv_channels) == (9, 3, 64)
    assert config.gated_linear_unit and config.activation_func is torch.nn.functional.silu
    assert config.normalization == "RMSNorm" and config.layernorm_epsilon == 1e-5
    assert not config.add_bias_linear and not config.add_qkv_bias
    assert spec.rotary_base == 100000.0 and spec.tie_embeddings and spec.padded_vocab_size == 49152
    with pytest.raises(ValueError, match="must divide the attention heads"):
        gpt_config_from_hf(smol, tp_size=2)


def test_config_qwen2_bias_and_refusals():
    from openrlhf_speed.backends.megatron.model import gpt_config_from_hf

    config, spec = gpt_config_from_hf(tiny("qwen2", rope_theta=1e6))
    assert config.add_qkv_bias and not config.add_bias_linear and spec.rotary_base == 1e6
    scaled = tiny("llama", rope_parameters={
        "rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
    })
    with pytest.raises(NotImplementedError, match="RoPE type 'llama3'"):
        gpt_config_from_hf(scaled)
    with pytest.raises(ValueError, match="must divide num_hidden_layers"):
        gpt_config_from_hf(tiny(), pp_size=3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU shims are off on CUDA machines")
def test_cpu_shims_cover_megatron_cuda_calls():
    # A fresh process: the shims patch torch and Megatron module state for good.
    code = textwrap.dedent("""
        import torch
        from openrlhf_speed.backends.megatron import cpu_shims
        assert cpu_shims.install() and cpu_shims.install()
        from megatron.core.transformer.utils import get_default_causal_mask
        from megatron.core.tensor_parallel import random
        assert get_default_causal_mask(3).tolist() == [[False, True, True], [False, False, True], [False, False, False]]
        t = torch.ones(2)
        assert t.cuda() is t
        tracker = random.get_cuda_rng_tracker()
        tracker.add("a", 7)
        torch.manual_seed(0); outer = torch.rand(3)
        torch.manual_seed(0)
        with tracker.fork("a"):
            inner = torch.rand(3)
        assert torch.equal(torch.rand(3), outer)  # the outer stream is untouched
        assert torch.equal(inner, torch.rand(3, generator=torch.Generator().manual_seed(7)))
        with tracker.fork("a"):
            assert not torch.equal(torch.rand(3), inner)  # the forked stream advances
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]
