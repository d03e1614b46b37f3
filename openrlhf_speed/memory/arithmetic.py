"""The arithmetic behind the memory plan (memory/plan.py): a model's dimensions from its
config.json, its parameter count, and the bytes each role holds, each figure returned with
the formula that gave it, so the plan can print both; and the plain records the plan reads
(Layout: the flags that matter; Hardware: what it checks against).

Rule: the DeepSpeed actor's model states come from DeepSpeed's own estimators
(`estimate_zero3_model_states_mem_needs`, `estimate_zero2_model_states_mem_needs`: the
functions behind `*_all_cold`, which return the numbers instead of printing them), never a
copy of their formulas. Everything they do not cover is computed here: activations, the
Megatron actor (14 B per parameter over tp x pp, 8 B more at the optimizer step), the vLLM
engines' weights and KV cache.

Measured (one H200, tests/backends/test_memory_plan_gpu.py, docs/gpu.md#the-memory-plan-against-a-gpu):
the bytes per logit below were fitted on seven one-GPU layouts, DeepSpeed ZeRO-3 with Adam on
the GPU and on the host at 0.5B and 1.5B (2 x 4096 tokens), the 7B activations alone (2 x 4096),
Megatron TP 1 at 0.5B and 1.5B (1 x 4096): plan / measured 0.93-1.05. Held out: DeepSpeed 1.5B
at 1 x 8192 (1.05) and the 7B activations at 1 x 2048 (0.86); Megatron 0.5B at 2 x 2048 missed
(1.18) and was refitted, so Megatron has no held-out check. Never measured: ZeRO-3 partitioning
across GPUs, the 7B recipe's own states, the runtime allowances. The counter compared is
torch.cuda.max_memory_allocated; memory reserved was not recorded. Hence ESTIMATE_MARGIN.
Byte counts assume the GPU dtypes (bf16 weights, activations and KV cache) unless told.
"""

import dataclasses
import json
import math
import os

GiB = 2**30
ESTIMATE_MARGIN = 0.3  # activations and overheads beyond what the GPU check covered
# The logits dominate the activations of the recipes' models (vocab 152k, 4096-token rows), so
# they are priced per logit (one token x one vocabulary entry) as each path holds them at its
# peak; read off peaks measured on an H200 at 0.5B-7B (torch.cuda.max_memory_allocated).
# OpenRLHF's Actor, training: the fp32 copy of the bf16 logits kept for the backward, and in
# the backward the fp32 gradient of each of its two uses (the label gather, the log-sum-exp).
HF_TRAIN_LOGIT_BYTES = 12
# Its no-grad log-prob forward: the bf16 logits and their fp32 copy, both live during the cast.
HF_FORWARD_LOGIT_BYTES = 6
# Megatron's output layer: its bf16 logits and the cross entropy's fp32 copy, which becomes the
# softmax it keeps and, in place, its gradient.
MEGATRON_LOGIT_BYTES = 6
# The local layer spec (no Transformer Engine) materializes the attention scores: per score, in
# one layer's backward, the bf16 scores and probabilities, the softmax's fp32 input and output,
# and their gradients; kept for the backward by every layer without recompute, the fp32 and
# bf16 probabilities.
ATTENTION_SCORE_BYTES = 24
ATTENTION_SCORE_SAVED_BYTES = 6
# Per GPU, outside the tensors counted: CUDA context, NCCL buffers, the caching allocator's
# fragmentation (training); CUDA graphs, the profiling run's activations and the sampler
# (vLLM, which subtracts them from its budget before sizing the KV cache).
TRAIN_RUNTIME_BYTES = 3 * GiB
VLLM_RUNTIME_BYTES = 2 * GiB
REF_RUNTIME_BYTES = GiB  # a colocated reference model's own process (it frees its cache after each forward)
PROCESS_HOST_BYTES = 4 * GiB  # host RSS of one GPU process (torch, CUDA, NCCL, Python)
MEGATRON_EXPORT_SHARD_BYTES = 2**30  # backends/megatron/checkpoint.export_hf's shard_bytes


@dataclasses.dataclass(frozen=True)
class ModelDims:
    """What the plan needs from a Llama/Qwen2-family config.json."""

    name: str
    model_type: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool
    max_position: int

    @classmethod
    def from_config(cls, cfg: dict, name: str = "model") -> "ModelDims":
        missing = [k for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                               "vocab_size") if k not in cfg]
        if missing:
            raise ValueError(f"{name}: config.json has no {', '.join(missing)} (the plan needs a Llama/Qwen2-style "
                             "decoder config)")
        heads = cfg["num_attention_heads"]
        model_type = cfg.get("model_type", "")
        return cls(name=name, model_type=model_type, hidden=cfg["hidden_size"], intermediate=cfg["intermediate_size"],
                   layers=cfg["num_hidden_layers"], heads=heads, kv_heads=cfg.get("num_key_value_heads") or heads,
                   head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads, vocab=cfg["vocab_size"],
                   tied=bool(cfg.get("tie_word_embeddings", False)),
                   qkv_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),  # Qwen2 always has QKV bias
                   max_position=cfg.get("max_position_embeddings", 0))

    @classmethod
    def from_folder(cls, path: str) -> "ModelDims":
        config = os.path.join(path, "config.json")
        if not os.path.isfile(config):
            raise ValueError(f"{path} has no config.json: the plan reads the model's config.json (no weights needed); "
                             "point --actor.model_name_or_path at a local model folder")
        with open(config) as f:
            return cls.from_config(json.load(f), name=path)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """QKV (+ bias), output projection, SwiGLU MLP (gate, up, down), two RMSNorms."""
        h = self.hidden
        attn = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return attn + bias + 3 * h * self.intermediate + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Layers + final norm + embedding + (untied) LM head."""
        return self.layers * self.layer_params + self.hidden + self.embedding_params * (1 if self.tied else 2)

    @property
    def largest_layer_params(self) -> int:
        """The largest module's own parameters, as DeepSpeed's `model_to_params` counts them:
        the embedding (or LM head), else one MLP projection."""
        return max(self.embedding_params, self.hidden * self.intermediate)

    def kv_bytes_per_token(self, dtype_bytes: int = 2, tp: int = 1) -> int:
        """layers x 2 (K, V) x KV heads x head dim x dtype, on one of `tp` ranks (vLLM splits
        the KV heads over TP, and replicates them when tp exceeds their number)."""
        return self.layers * 2 * max(1, self.kv_heads // tp) * self.head_dim * dtype_bytes

    def describe(self) -> str:
        return (f"{self.params / 1e9:.2f}e9 parameters ({self.layers} layers x {self.layer_params / 1e6:.1f}M, "
                f"embedding {self.embedding_params / 1e6:.0f}M{', tied' if self.tied else ' + LM head'}; hidden "
                f"{self.hidden}, intermediate {self.intermediate}, {self.heads} heads / {self.kv_heads} KV heads of "
                f"{self.head_dim}, vocab {self.vocab})")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What the plan checks against: one GPU, one node's RAM, the GPUs sharing a node."""

    gpu_bytes: float
    host_bytes: float
    gpus_per_node: int
    source: str  # where each figure came from, for the plan's first lines


@dataclasses.dataclass(frozen=True)
class Layout:
    """What the plan reads from the train flags (memory/plan.layout_from_args); a fix
    is a `dataclasses.replace` of it (memory/parts.py)."""

    backend: str = "deepspeed"
    actor_nodes: int = 1
    actor_per_node: int = 1
    zero_stage: int = 3
    adam_offload: bool = False
    checkpointing: bool = False
    train_micro: int = 1
    rollout_micro: int = 1
    max_len: int = 2048
    has_ref: bool = False
    ref_gpus: int = 0
    ref_nodes: int = 1
    ref_colocated: bool = False
    ref_offload: bool = False
    colocate_all: bool = False
    tp: int = 1
    pp: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    megatron_bf16: bool = True
    te: bool = False
    engines: int = 0
    vllm_tp: int = 1
    utilization: float = 0.9
    vllm_bytes: int = 2
    batch: int = 1  # B, prompts per training step
    n: int = 1  # N, responses per prompt
    first_request: int = 1  # responses a prompt's first request asks for (N_init when screening)
    inflight_prompts: int = 1  # the driver's prompt window, min(SpeedConfig.inflight_limit, buffer_limit)
    inflight_responses: int = 0  # --speed.max_inflight_responses, 0: none
    speed: bool = True  # False: OpenRLHF's own generator (--speed.strategy off)

    @property
    def actor_gpus(self) -> int:
        return self.actor_nodes * self.actor_per_node


@dataclasses.dataclass(frozen=True)
class Figure:
    """One row of the plan: bytes and the formula behind them."""

    what: str
    nbytes: float
    how: str
    estimate: bool = False

    @property
    def gib(self) -> float:
        return self.nbytes / GiB


# -- the DeepSpeed actor: DeepSpeed's estimators ---------------------------------------------
def deepspeed_states(dims: ModelDims, zero_stage: int, adam_offload: bool, gpus_per_node: int,
                     nodes: int) -> tuple:
    """(per-GPU Figure, per-node host Figure) of the model states, from DeepSpeed's estimator
    for the stage with OpenRLHF's settings (optimizer offload = --ds.adam_offload, parameters
    never offloaded, zero.Init for ZeRO-3). Stages 0-2 use the ZeRO-2 estimator; stage 0 is
    priced as one GPU (nothing partitioned), stage 1 as stage 2 (it partitions gradients too)."""
    p, g = dims.params, gpus_per_node * nodes
    if zero_stage == 3:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            p, dims.largest_layer_params, num_gpus_per_node=gpus_per_node, num_nodes=nodes,
            cpu_offload=adam_offload, cpu_offload_params=False, zero_init=True)
        call = (f"DeepSpeed estimate_zero3_model_states_mem_needs({p / 1e9:.2f}e9 params, largest layer "
                f"{dims.largest_layer_params / 1e6:.0f}M, {gpus_per_node} GPU x {nodes} node, "
                f"cpu_offload={adam_offload}, cpu_offload_params=False, zero_init=True)")
        gpu_how = ("4 B x largest layer + 2 B x params / GPUs" if adam_offload
                   else "4 B x largest layer + 18 B x params / GPUs")
        cpu_how = "16 B x params / nodes x 1.5" if adam_offload else "4 B x largest layer x GPUs per node x 1.5"
    else:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

        gpn, n = (gpus_per_node, nodes) if zero_stage else (1, 1)
        cpu, gpu = estimate_zero2_model_states_mem_needs(p, num_gpus_per_node=gpn, num_nodes=n,
                                                         cpu_offload=adam_offload)
        call = (f"DeepSpeed estimate_zero2_model_states_mem_needs({p / 1e9:.2f}e9 params, {gpn} GPU x {n} node, "
                f"cpu_offload={adam_offload})" + (" (stage 0: nothing partitioned)" if not zero_stage else ""))
        gpu_how = "2 B x params" if adam_offload else "2 B x params + 18 B x params / GPUs"
        cpu_how = "max(4 B x GPUs, 16 B) x params x 1.5" if adam_offload else "4 B x params x GPUs per node x 1.5"
    return (Figure("model states", gpu, f"{call}: {gpu_how}"),
            Figure("DeepSpeed host states" + (" (offloaded Adam, fp32 weights and gradients)" if adam_offload else ""),
                   cpu, f"{call}: {cpu_how} (1.5: DeepSpeed's buffer factor)"))


# -- activations (estimates) -----------------------------------------------------------------
def hf_layer_bytes(d: ModelDims) -> int:
    """Per token, one HF decoder layer's saved activations in bf16: two RMSNorms (bf16 input,
    fp32 normalized, bf16 output: 8h B each), Q/K/V after RoPE and the attention output
    (flash / sdpa keep no score matrix) and o_proj's contiguous input, and the SwiGLU MLP
    (gate, SiLU, up, product: 8 I B)."""
    return 16 * d.hidden + 2 * (d.q_dim + 2 * d.kv_dim) + 4 * d.q_dim + 8 * d.intermediate


def deepspeed_activations(d: ModelDims, micro_batch: int, max_len: int, checkpointing: bool) -> Figure:
    """One training micro-batch of `micro_batch` x `max_len` tokens through the HF model
    (packed or padded, the same bound). With gradient checkpointing each layer keeps its bf16
    input, and the backward first goes through the logits (HF_TRAIN_LOGIT_BYTES each) and only
    then recomputes one layer at a time (its activations and their gradients), so the peak is
    the inputs + the larger of the two; without it every layer keeps all while the logits'
    backward runs."""
    t = micro_batch * max_len
    logits = t * d.vocab * HF_TRAIN_LOGIT_BYTES
    if checkpointing:
        layer = 2 * t * hf_layer_bytes(d)
        body = d.layers * t * 2 * d.hidden + max(layer, logits)
        how = (f"{micro_batch} x {max_len} tokens, gradient checkpointing: {d.layers} layer inputs x 2h B + the "
               f"larger of the logits' backward ({HF_TRAIN_LOGIT_BYTES} B x {d.vocab} per token) and one layer "
               f"recomputed with its gradients (2 x {hf_layer_bytes(d) / 1024:.0f} KiB per token)")
        return Figure("activations (training)", body, how, estimate=True)
    body = d.layers * t * hf_layer_bytes(d)
    how = (f"{micro_batch} x {max_len} tokens, no checkpointing: {d.layers} layers x "
           f"{hf_layer_bytes(d) / 1024:.0f} KiB + logits {HF_TRAIN_LOGIT_BYTES} B x {d.vocab} per token")
    return Figure("activations (training)", body + logits, how, estimate=True)


def forward_activations(d: ModelDims, micro_batch: int, max_len: int, tp: int = 1) -> Figure:
    """A no-grad log-prob forward (experience making: actor and reference model): one layer
    live and the micro-batch's logits in bf16 and fp32 (HF_FORWARD_LOGIT_BYTES each)."""
    t = micro_batch * max_len
    nbytes = t * hf_layer_bytes(d) // tp + t * HF_FORWARD_LOGIT_BYTES * d.vocab // tp
    return Figure("activations (log-prob forward)", nbytes,
                  f"{micro_batch} x {max_len} tokens (--rollout.micro_batch_size): one layer + logits "
                  f"{HF_FORWARD_LOGIT_BYTES} B x {d.vocab}{f' / tp {tp}' if tp > 1 else ''} per token", estimate=True)


# -- the Megatron actor --------------------------------------------------------------------
def megatron_stage_params(d: ModelDims, pp: int) -> int:
    """The largest pipeline stage: its layers, plus the embedding (first stage) or the LM head
    and final norm (last stage); with pp 1 both (one copy when tied)."""
    extra = d.embedding_params * (1 if d.tied or pp > 1 else 2) + d.hidden
    return math.ceil(d.layers / pp) * d.layer_params + extra


def megatron_states(d: ModelDims, tp: int, pp: int, bf16: bool, fused_wgrad: bool = False) -> tuple:
    """(resident Figure, optimizer-step Figure) per GPU. bf16 (MasterWeightsAdamW): weights 2
    + fp32 master weights 4 + Adam m, v 8 stay; the fp32 main gradients (4) are freed after
    each step and filled during the backward, mostly after the logits' backward (the peak of
    the activations), so they count in the step: with AdamW's foreach update's fp32 temporary,
    8 B per parameter. With fused weight-gradient GEMMs (Transformer Engine) the main
    gradients are zeroed before the backward, so they stay. fp32: weights 4 + Adam 8, then
    gradients 4 + the temporary 4. No distributed optimizer: split over tp x pp only."""
    per_rank = megatron_stage_params(d, pp) / tp
    grads_stay = bf16 and fused_wgrad
    b = (14 if bf16 else 12) + (4 if grads_stay else 0)
    parts = "bf16 2 + fp32 master 4 + Adam 8" if bf16 else "fp32 4 + Adam 8"
    states = Figure("model states", b * per_rank,
                    f"{b} B x {per_rank / 1e9:.2f}e9 params (largest stage / tp {tp}, pp {pp}; {parts}"
                    f"{' + fp32 main grad 4, zeroed before the backward (fused wgrad)' if grads_stay else ''}; "
                    "no distributed optimizer, so nothing is split over dp)")
    s_b = 4 if grads_stay else 8
    step = Figure("optimizer step", s_b * per_rank,
                  ("AdamW's foreach update: one fp32 temporary, 4 B x params" if grads_stay else
                   "fp32 gradients 4 B + AdamW's foreach update's fp32 temporary 4 B x params"))
    return states, step


def megatron_layer_bytes(d: ModelDims, tp: int, sequence_parallel: bool) -> float:
    """Per token, one Megatron layer: norm inputs and outputs whole on every TP rank (split
    with sequence parallelism), Q/K/V and attention output, gate/up/SwiGLU split over TP."""
    whole = 8 * d.hidden / (tp if sequence_parallel else 1)
    return whole + (2 * (d.q_dim + 2 * d.kv_dim) + 2 * d.q_dim + 6 * d.intermediate) / tp


def _attention_scores(d: ModelDims, micro_batch: int, max_len: int, tp: int) -> int:
    """Attention scores of one layer on one tp rank (the local spec materializes them)."""
    return micro_batch * (d.heads // tp) * max_len ** 2


def megatron_activations(d: ModelDims, micro_batch: int, max_len: int, tp: int, pp: int, recompute: str,
                         sequence_parallel: bool, te: bool) -> Figure:
    """One micro-batch on the largest stage (one micro-batch per schedule call: stages never
    hold several). full: each layer's input + one layer recomputed or the logits; none / selective: every
    layer's activations (+ the local spec's attention scores without Transformer Engine and
    selective recompute). Logits on the last stage: vocab / tp columns, MEGATRON_LOGIT_BYTES
    each."""
    t, stage_layers = micro_batch * max_len, math.ceil(d.layers / pp)
    layer = megatron_layer_bytes(d, tp, sequence_parallel)
    logits = t * d.vocab / tp * MEGATRON_LOGIT_BYTES
    if recompute == "full":  # the logits' backward runs before any layer is recomputed
        inputs = stage_layers * t * 2 * d.hidden / (tp if sequence_parallel else 1)
        scores = 0 if te else _attention_scores(d, micro_batch, max_len, tp) * ATTENTION_SCORE_BYTES
        how = (f"{stage_layers} layer inputs x 2h B + the larger of the logits ({MEGATRON_LOGIT_BYTES} B x {d.vocab} "
               f"/ tp per token) and one layer recomputed ({layer / 1024:.0f} KiB per token"
               f"{'' if te else f' + attention scores {ATTENTION_SCORE_BYTES} B x heads x tokens^2, local spec'})")
        return Figure("activations (training)", inputs + max(t * layer + scores, logits),
                      f"{micro_batch} x {max_len} tokens, --megatron.recompute full: {how}", estimate=True)
    body = stage_layers * t * layer
    how = f"{stage_layers} layers x {layer / 1024:.0f} KiB per token"
    if not te and recompute == "none":
        body += stage_layers * _attention_scores(d, micro_batch, max_len, tp) * ATTENTION_SCORE_SAVED_BYTES
        how += " + attention scores (local layer spec, no Transformer Engine)"
    return Figure("activations (training)", body + logits,
                  f"{micro_batch} x {max_len} tokens, --megatron.recompute {recompute}: {how} + logits "
                  f"{MEGATRON_LOGIT_BYTES} B x {d.vocab} / tp per token", estimate=True)


# -- vLLM engines ------------------------------------------------------------------------------
def vllm_kv_cache(d: ModelDims, tp: int, utilization: float, gpu_bytes: float, dtype_bytes: int) -> tuple:
    """(weights, runtime, KV cache) Figures per GPU of an engine: its share of the weights,
    vLLM's own overhead, and what --vllm.gpu_memory_utilization leaves for the cache."""
    weights = Figure("weights", dtype_bytes * d.params / tp, f"{dtype_bytes} B x {d.params / 1e9:.2f}e9 params / TP {tp}")
    runtime = Figure("runtime", VLLM_RUNTIME_BYTES, "CUDA graphs, profiling-run activations, sampler", estimate=True)
    budget = utilization * gpu_bytes
    cache = Figure("KV cache", budget - weights.nbytes - runtime.nbytes,
                   f"--vllm.gpu_memory_utilization {utilization:g} x {gpu_bytes / GiB:.1f} GiB - weights - runtime")
    return weights, runtime, cache
