"""Megatron-Core `GPTModel` for HF Llama / Qwen2 checkpoints, and model-parallel setup.

`gpt_config_from_hf` turns an HF config into a `TransformerConfig` plus the `GPTModel`
keyword arguments (`GPTSpec`); `build_gpt_model` builds this rank's pipeline stage.
Supported: `LlamaForCausalLM` (incl. SmolLM2: tied embeddings, GQA) and `Qwen2ForCausalLM`
(QKV bias). Both are pre-norm RMSNorm decoders with SwiGLU MLPs and default RoPE; other
RoPE types, sliding windows and non-QKV biases are refused with a message, not approximated.

Layer spec: Transformer Engine's when `transformer_engine` imports (fused norm+linear,
TE attention), Megatron's local spec otherwise (CPU, or GPU without TE). Parameter names
differ between the two (see `weights.py`).

Vocabulary padding policy: Megatron splits the embedding and output layer by rows across
TP ranks, so the vocabulary is padded to the next multiple of `tp_size * vocab_divisible_by`
(default 1, which pads nothing for the usual vocabularies at TP <= 8: 49152, 128256,
151936, 152064 are all multiples of 8). Padded rows are zero in both matrices; their logits
are 0, not -inf, so whoever computes log-probs over the padded vocabulary must slice them
off (`logits[..., :hf_vocab_size]`) or mask them on the last TP rank.

CPU (no CUDA): `use_cpu_initialization=True`, fp32 parameters, every fusion off, no
sequence parallel; `cpu_shims` cover Megatron's CUDA-only calls. GPU: the fusions whose
kernels are there (`fusion_flags`: SwiGLU and bias-dropout-add always, RoPE with TE, masked
softmax with apex, fp32 gradient accumulation in the GEMM with TE or apex and bf16 weights).
The optimizer is the caller's (no distributed optimizer here).
"""

import dataclasses
import importlib.util
from typing import Optional

import torch
import torch.nn.functional as F

SUPPORTED_ARCHS = ("llama", "qwen2")
# Fused kernels are CUDA/Apex/TE-only and change rounding: all off on CPU (Megatron's
# defaults too); on GPU `fusion_flags` turns on those whose kernels this process has.
_NO_FUSIONS = dict(
    bias_activation_fusion=False,
    masked_softmax_fusion=False,
    persist_layer_norm=False,
    bias_dropout_fusion=False,
    apply_rope_fusion=False,
    gradient_accumulation_fusion=False,
)
FUSION_NAMES = tuple(_NO_FUSIONS)
# The extension modules Megatron imports for two of them (apex built with --cuda_ext).
APEX_SOFTMAX_MODULES = ("scaled_upper_triang_masked_softmax_cuda", "scaled_masked_softmax_cuda")
APEX_WGRAD_MODULE = "fused_weight_gradient_mlp_cuda"


def fused_kernels() -> dict:
    """Which fused-kernel providers this process can load: Transformer Engine, and apex's
    masked-softmax and weight-gradient extensions."""
    found = lambda name: importlib.util.find_spec(name) is not None  # noqa: E731
    return {
        "te": te_available(),
        "apex_softmax": all(map(found, APEX_SOFTMAX_MODULES)),
        "apex_wgrad": found(APEX_WGRAD_MODULE),
    }


def fusion_flags(on_gpu: bool, kernels: dict, master_weights: bool, use_te: bool) -> dict:
    """TransformerConfig fusion flags. CPU: all off. GPU:
    - bias-activation (SwiGLU) and bias-dropout-add: Megatron's own torch.compile'd fusions,
      no extension needed;
    - RoPE: Transformer Engine's fused kernel (Megatron refuses the flag without TE);
    - masked softmax: apex's kernels, used by the local spec's attention (TE's attention has
      its own fused softmax);
    - gradient accumulation into fp32 `main_grad` inside the weight-gradient GEMM: TE's layers
      or apex's extension; only with master weights (bf16 parameters), which is where the
      optimizer keeps a `main_grad` (train_utils.MasterWeightsAdamW(fused_wgrad=True)).
    persist_layer_norm stays off: it is apex's LayerNorm kernel, these models use RMSNorm."""
    flags = dict(_NO_FUSIONS)
    if not on_gpu:
        return flags
    flags.update(
        bias_activation_fusion=True,
        bias_dropout_fusion=True,
        apply_rope_fusion=bool(kernels.get("te")),
        masked_softmax_fusion=bool(kernels.get("apex_softmax")),
        gradient_accumulation_fusion=master_weights and bool(kernels.get("te") if use_te else kernels.get("apex_wgrad")),
    )
    return flags


@dataclasses.dataclass
class GPTSpec:
    """Everything besides the TransformerConfig that `GPTModel.__init__` needs."""

    arch: str
    hf_vocab_size: int
    padded_vocab_size: int
    max_sequence_length: int
    rotary_base: float
    tie_embeddings: bool
    use_te: bool


def megatron_dtype(args) -> str:
    """Parameter dtype from `--megatron.dtype`: auto is bf16 on GPU (fp32 master weights in
    the optimizer), fp32 on CPU. Read by the flags' plan and by every actor rank."""
    choice = args.megatron.dtype
    if choice == "auto":
        # The run's device (decided once in the driver, compat/device.py), not this process's
        # torch: a CPU driver of a GPU cluster must say bf16 too.
        from openrlhf_speed import compat

        return "fp32" if compat.cpu_mode() else "bf16"
    return choice


def te_available() -> bool:
    """Transformer Engine's layers need CUDA; its import is the test Megatron itself uses."""
    if not torch.cuda.is_available() or importlib.util.find_spec("transformer_engine") is None:
        return False
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:
        return False
    return True


def padded_vocab_size(vocab_size: int, tp_size: int, divisible_by: int = 1) -> int:
    multiple = tp_size * divisible_by
    return -(-vocab_size // multiple) * multiple


def rope_theta(hf_config) -> float:
    """transformers 5 keeps RoPE settings in `rope_parameters`; older configs in
    `rope_theta` / `rope_scaling`. Only the default (unscaled) RoPE is supported."""
    params = getattr(hf_config, "rope_parameters", None) or {}
    scaling = getattr(hf_config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type != "default":
        raise NotImplementedError(
            f"RoPE type {rope_type!r} is not supported by the Megatron backend yet (only 'default'); "
            "use the DeepSpeed backend for this model"
        )
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    return float(theta if theta is not None else 10000.0)


def check_supported(hf_config, tp_size: int) -> str:
    arch = hf_config.model_type
    if arch not in SUPPORTED_ARCHS:
        raise NotImplementedError(
            f"model_type {arch!r}: the Megatron backend supports {SUPPORTED_ARCHS}; use the DeepSpeed backend"
        )
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {hf_config.hidden_act!r}: only SwiGLU (silu) is mapped")
    if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
        raise NotImplementedError("Llama attention_bias/mlp_bias (bias on o_proj/MLP) is not mapped")
    if getattr(hf_config, "use_sliding_window", False):
        raise NotImplementedError("sliding-window attention is not mapped")
    heads, groups = hf_config.num_attention_heads, hf_config.num_key_value_heads
    if heads % tp_size or groups % tp_size:
        raise ValueError(
            f"tensor parallel size {tp_size} must divide the attention heads ({heads}) and the "
            f"key/value heads ({groups}); choose a TP size that divides both"
        )
    return arch


def gpt_config_from_hf(
    hf_config,
    tp_size: int = 1,
    pp_size: int = 1,
    params_dtype: torch.dtype = torch.float32,
    vocab_divisible_by: int = 1,
    use_te: Optional[bool] = None,
    **overrides,
):
    """(TransformerConfig, GPTSpec) for an HF Llama/Qwen2 config at this TP/PP size.
    `overrides` replace or add TransformerConfig fields (e.g. `sequence_parallel=True` on GPU,
    `recompute_granularity`)."""
    from megatron.core.transformer import TransformerConfig

    arch = check_supported(hf_config, tp_size)
    if hf_config.num_hidden_layers % pp_size:
        raise ValueError(
            f"pipeline parallel size {pp_size} must divide num_hidden_layers ({hf_config.num_hidden_layers})"
        )
    on_cpu = not torch.cuda.is_available()
    use_te = te_available() if use_te is None else use_te
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    kwargs = dict(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        ffn_hidden_size=hf_config.intermediate_size,
        num_attention_heads=hf_config.num_attention_heads,
        num_query_groups=hf_config.num_key_value_heads,
        kv_channels=head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        gated_linear_unit=True,  # SwiGLU: linear_fc1 = [gate; up], act(gate) * up
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=(arch == "qwen2"),
        hidden_dropout=0.0,
        attention_dropout=getattr(hf_config, "attention_dropout", 0.0),
        init_method_std=getattr(hf_config, "initializer_range", 0.02),
        tensor_model_parallel_size=tp_size,
        pipeline_model_parallel_size=pp_size,
        sequence_parallel=False,
        params_dtype=params_dtype,
        pipeline_dtype=params_dtype,
        bf16=params_dtype == torch.bfloat16,
        fp16=params_dtype == torch.float16,
        use_cpu_initialization=on_cpu,
        **fusion_flags(not on_cpu, fused_kernels() if not on_cpu else {},
                       master_weights=params_dtype != torch.float32, use_te=use_te),
    )
    config = TransformerConfig(**{**kwargs, **overrides})
    spec = GPTSpec(
        arch=arch,
        hf_vocab_size=hf_config.vocab_size,
        padded_vocab_size=padded_vocab_size(hf_config.vocab_size, tp_size, vocab_divisible_by),
        max_sequence_length=hf_config.max_position_embeddings,
        rotary_base=rope_theta(hf_config),
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        use_te=use_te,
    )
    return config, spec


def layer_spec(use_te: bool):
    from megatron.core.models.gpt import gpt_layer_specs

    if use_te:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    return gpt_layer_specs.get_gpt_layer_local_spec(normalization="RMSNorm")


def build_gpt_model(config, spec: GPTSpec, parallel_output: bool = True):
    """This rank's pipeline stage of the model; model parallelism must be initialized
    (`init_model_parallel`). With `parallel_output=True` logits stay vocab-parallel
    ([b, s, V/tp] per TP rank), as Megatron's vocab-parallel cross-entropy wants."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel

    from . import cpu_shims

    cpu_shims.install()
    model = GPTModel(
        config=config,
        transformer_layer_spec=layer_spec(spec.use_te),
        vocab_size=spec.padded_vocab_size,
        max_sequence_length=spec.max_sequence_length,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        parallel_output=parallel_output,
        share_embeddings_and_output_weights=spec.tie_embeddings,
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=spec.rotary_base,
    )
    if torch.cuda.is_available():
        # Megatron allocates its own linear layers on the current device, but the local
        # spec's norms are plain torch modules, created on the CPU.
        model.cuda(torch.cuda.current_device())
    return model


# Rank order with the data-parallel index slowest: consecutive tp * pp ranks form one model
# replica, which is how OpenRLHF's RayActorGroup hands out micro-batches (see
# cli/megatron_flags.py). Megatron's default ("tp-cp-ep-dp-pp") interleaves replicas.
REPLICA_CONTIGUOUS_ORDER = "tp-cp-ep-pp-dp"


def init_model_parallel(
    tp_size: int = 1, pp_size: int = 1, seed: int = 1234, order: str = REPLICA_CONTIGUOUS_ORDER
) -> None:
    """Megatron's process groups and RNG states on top of an initialized default group
    (torch.distributed, gloo on CPU / nccl on GPU). Idempotent for the same sizes."""
    from megatron.core import parallel_state, tensor_parallel

    from . import cpu_shims

    cpu_shims.install()
    if not torch.distributed.is_initialized():
        raise RuntimeError("torch.distributed must be initialized before init_model_parallel")
    if parallel_state.model_parallel_is_initialized():
        if (
            parallel_state.get_tensor_model_parallel_world_size() == tp_size
            and parallel_state.get_pipeline_model_parallel_world_size() == pp_size
        ):
            return
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp_size, pipeline_model_parallel_size=pp_size, order=order
    )
    # The CPU generator is the "default" (data-parallel) state on CPU; seed it too.
    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)
