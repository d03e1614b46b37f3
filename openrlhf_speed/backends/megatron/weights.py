"""HF <-> Megatron-Core weight mapping for Llama / Qwen2 (`model.py`'s GPTModel).

Loading (`hf_to_megatron`): the HF state dict becomes the state dict of one rank
(tp_rank, pp_rank): only the tensors that rank holds are read, so a lazy mapping
(`HFCheckpoint`) never materialises the whole model on one rank.
Export (`iter_hf_weights`): a generator, run collectively by every rank of the model-parallel
group, that yields (hf_name, full tensor) one tensor at a time: the owning stage gathers
the TP shards (all_gather over the TP group), converts, and broadcasts the TP-merged tensor
over the PP group, so every rank sees every tensor but never holds more than one.

Layouts (H hidden, hd head_dim, ng KV groups, hpg = heads per group, F ffn size, V vocab):
- linear_qkv.weight [ng * (hpg + 2) * hd, H]: for each KV group g, its hpg query heads,
  then its key head, then its value head (Megatron's interleaved per-group layout; the bias
  the same without H). TP rank r holds the contiguous groups [r*ng/tp, (r+1)*ng/tp), so
  concatenating the shards along dim 0 gives the full tensor back.
- linear_fc1.weight [2 * F/tp, H] per TP rank: [gate shard r; up shard r] (Megatron's
  SwiGLU takes act(first half) * second half). The TP-merged tensor is [gate; up].
- linear_proj (o_proj) and linear_fc2 (down_proj): row parallel, split along dim 1.
- embedding / output_layer: vocab parallel, rows padded with zeros to the padded vocabulary
  (see `model.py`), split along dim 0.
- norms: replicated on every TP rank.
Pipeline stage s holds layers [s*L/pp, (s+1)*L/pp), numbered from 0 inside the stage; the
embedding lives on the first stage, the final norm and the output layer on the last. With
tied embeddings and pp > 1 the last stage also holds `output_layer.weight`, a copy of the
embedding (Megatron keeps the two in step); export takes the first stage's copy.
Transformer Engine's layer spec fuses each pre-norm into the next linear
(`linear_qkv.layer_norm_weight`, `linear_fc1.layer_norm_weight`); `te_names` selects those.
"""

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Dict, Iterator, List, Tuple

import torch
import torch.distributed as dist

# Megatron parameter (inside decoder.layers.<i>.) -> (HF parameter(s) inside model.layers.<i>., kind)
_QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
_LAYER_PARAMS = {
    "self_attention.linear_qkv.weight": (tuple(p + ".weight" for p in _QKV), "qkv"),
    "self_attention.linear_qkv.bias": (tuple(p + ".bias" for p in _QKV), "qkv"),
    "self_attention.linear_proj.weight": (("self_attn.o_proj.weight",), "row"),
    "mlp.linear_fc1.weight": (("mlp.gate_proj.weight", "mlp.up_proj.weight"), "fc1"),
    "mlp.linear_fc2.weight": (("mlp.down_proj.weight",), "row"),
}
_NORMS_LOCAL = {
    "input_layernorm.weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
}
_NORMS_TE = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
}


@dataclasses.dataclass(frozen=True)
class WeightLayout:
    """Shapes and parallel sizes the mapping needs; `from_hf` builds it from an HF config."""

    num_layers: int
    hidden_size: int
    ffn_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hf_vocab_size: int
    padded_vocab_size: int
    tie_embeddings: bool
    qkv_bias: bool
    tp_size: int = 1
    pp_size: int = 1
    te_names: bool = False

    @classmethod
    def from_hf(cls, hf_config, tp_size=1, pp_size=1, te_names=False, vocab_divisible_by=1):
        from .model import padded_vocab_size

        heads = hf_config.num_attention_heads
        return cls(
            num_layers=hf_config.num_hidden_layers,
            hidden_size=hf_config.hidden_size,
            ffn_size=hf_config.intermediate_size,
            num_heads=heads,
            num_kv_heads=hf_config.num_key_value_heads,
            head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads,
            hf_vocab_size=hf_config.vocab_size,
            padded_vocab_size=padded_vocab_size(hf_config.vocab_size, tp_size, vocab_divisible_by),
            tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            qkv_bias=hf_config.model_type == "qwen2",
            tp_size=tp_size,
            pp_size=pp_size,
            te_names=te_names,
        )

    @property
    def layers_per_stage(self) -> int:
        return self.num_layers // self.pp_size

    def stage_params(self, pp_rank: int) -> List[Tuple[str, str, Tuple[str, ...]]]:
        """(megatron name, kind, hf names) of stage `pp_rank`, in export order."""
        first, last = pp_rank == 0, pp_rank == self.pp_size - 1
        out = []
        if first:
            out.append(("embedding.word_embeddings.weight", "vocab", ("model.embed_tokens.weight",)))
        norms = _NORMS_TE if self.te_names else _NORMS_LOCAL
        for i in range(self.layers_per_stage):
            hf_prefix = f"model.layers.{pp_rank * self.layers_per_stage + i}."
            for mg, hf in norms.items():
                out.append((f"decoder.layers.{i}.{mg}", "norm", (hf_prefix + hf,)))
            for mg, (hf_names, kind) in _LAYER_PARAMS.items():
                if mg.endswith(".bias") and not self.qkv_bias:
                    continue
                out.append((f"decoder.layers.{i}.{mg}", kind, tuple(hf_prefix + h for h in hf_names)))
        if last:
            out.append(("decoder.final_layernorm.weight", "norm", ("model.norm.weight",)))
            if not self.tie_embeddings:
                out.append(("output_layer.weight", "vocab", ("lm_head.weight",)))
            elif not first:
                # Tied and pipelined: the last stage's copy of the embedding (not exported).
                out.append(("output_layer.weight", "tied_copy", ("model.embed_tokens.weight",)))
        return out

    def merged_shape(self, name: str, kind: str) -> Tuple[int, ...]:
        """Shape of a Megatron parameter with its TP shards merged (= its TP=1 shape)."""
        h, hd = self.hidden_size, self.head_dim
        if kind == "qkv":
            rows = (self.num_heads + 2 * self.num_kv_heads) * hd
            return (rows,) if name.endswith(".bias") else (rows, h)
        if kind == "fc1":
            return (2 * self.ffn_size, h)
        if kind == "row":
            return (h, self.num_heads * hd) if "linear_proj" in name else (h, self.ffn_size)
        if kind in ("vocab", "tied_copy"):
            return (self.padded_vocab_size, h)
        return (h,)


# ---- HF -> Megatron (one rank) ----------------------------------------------------------


def _qkv_to_megatron(q, k, v, layout: WeightLayout, tp_rank: int) -> torch.Tensor:
    ng, hd = layout.num_kv_heads, layout.head_dim
    rest = q.shape[1:]
    # [ng, hpg*hd | hd | hd, *rest]: each KV group's queries, then its key, then its value.
    grouped = torch.cat([q.reshape(ng, -1, *rest), k.reshape(ng, hd, *rest), v.reshape(ng, hd, *rest)], dim=1)
    per_rank = ng // layout.tp_size
    return grouped[tp_rank * per_rank : (tp_rank + 1) * per_rank].reshape(-1, *rest).contiguous()


def _to_megatron(kind: str, hf: List[torch.Tensor], layout: WeightLayout, tp_rank: int) -> torch.Tensor:
    tp = layout.tp_size
    if kind == "qkv":
        return _qkv_to_megatron(*hf, layout, tp_rank)
    if kind == "fc1":
        gate, up = (t.chunk(tp, dim=0)[tp_rank] for t in hf)
        return torch.cat([gate, up], dim=0)
    if kind == "row":
        return hf[0].chunk(tp, dim=1)[tp_rank].contiguous()
    if kind in ("vocab", "tied_copy"):
        weight = hf[0]
        pad = layout.padded_vocab_size - weight.shape[0]
        if pad:
            weight = torch.cat([weight, weight.new_zeros(pad, weight.shape[1])], dim=0)
        return weight.chunk(tp, dim=0)[tp_rank].contiguous()
    return hf[0].clone()


def hf_to_megatron(hf_state: Mapping, layout: WeightLayout, tp_rank: int, pp_rank: int) -> Dict[str, torch.Tensor]:
    """State dict of rank (tp_rank, pp_rank), for `GPTModel.load_state_dict(..., strict=False)`
    (Megatron's `_extra_state` entries are not produced). Reads only this rank's tensors.
    A tied checkpoint may or may not contain `lm_head.weight`; the embedding is used."""
    out = {}
    for mg_name, kind, hf_names in layout.stage_params(pp_rank):
        out[mg_name] = _to_megatron(kind, [hf_state[n] for n in hf_names], layout, tp_rank)
    return out


def load_hf_weights(model, hf_state: Mapping, layout: WeightLayout, tp_rank: int, pp_rank: int) -> None:
    """Copy an HF state dict into this rank's GPTModel; fails on any missing/extra tensor."""
    state = hf_to_megatron(hf_state, layout, tp_rank, pp_rank)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    if missing or unexpected:
        raise RuntimeError(f"HF -> Megatron mapping mismatch: missing {missing}, unexpected {unexpected}")


# ---- Megatron -> HF ----------------------------------------------------------------------


def merge_tp_shards(kind: str, shards: List[torch.Tensor]) -> torch.Tensor:
    """TP shards of one parameter (rank order) -> the TP=1 Megatron tensor."""
    if len(shards) == 1:
        return shards[0]
    if kind == "fc1":
        halves = [s.chunk(2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    if kind == "row":
        return torch.cat(shards, dim=1)
    if kind == "norm":
        return shards[0]
    return torch.cat(shards, dim=0)  # qkv (whole groups per rank), vocab


def megatron_to_hf(kind: str, merged: torch.Tensor, hf_names: Tuple[str, ...], layout: WeightLayout):
    """A TP-merged Megatron parameter -> [(hf_name, tensor)]."""
    if kind == "qkv":
        ng, hd = layout.num_kv_heads, layout.head_dim
        q_rows = layout.num_heads // ng * hd
        rest = merged.shape[1:]
        q, k, v = merged.reshape(ng, q_rows + 2 * hd, *rest).split([q_rows, hd, hd], dim=1)
        parts = [t.reshape(-1, *rest) for t in (q, k, v)]
    elif kind == "fc1":
        parts = list(merged.chunk(2, dim=0))
    elif kind == "vocab":
        parts = [merged[: layout.hf_vocab_size]]
    else:
        parts = [merged]
    return [(n, p.contiguous()) for n, p in zip(hf_names, parts)]


def iter_hf_weights(model, layout: WeightLayout, dtype: torch.dtype = None) -> Iterator[Tuple[str, torch.Tensor]]:
    """Yield (hf_name, full tensor) for the whole model, one tensor at a time, on every rank
    of the model-parallel group; every rank of the group must iterate it to the end (each
    tensor is a collective). Order: stage by stage, layer by layer, as in `stage_params`.
    `dtype` casts before the broadcast (e.g. bf16 for vLLM)."""
    from megatron.core import parallel_state as ps

    tp_group, pp_group = ps.get_tensor_model_parallel_group(), ps.get_pipeline_model_parallel_group()
    my_stage = ps.get_pipeline_model_parallel_rank()
    params = dict(model.named_parameters())
    dtype = dtype or next(iter(params.values())).dtype
    device = next(iter(params.values())).device
    pp_ranks = dist.get_process_group_ranks(pp_group) if layout.pp_size > 1 else None
    for stage in range(layout.pp_size):
        for mg_name, kind, hf_names in layout.stage_params(stage):
            if kind == "tied_copy":
                continue
            if stage == my_stage:
                local = params[mg_name].detach()
                if layout.tp_size > 1 and kind != "norm":
                    shards = [torch.empty_like(local) for _ in range(layout.tp_size)]
                    dist.all_gather(shards, local.contiguous(), group=tp_group)
                else:
                    shards = [local]
                merged = merge_tp_shards(kind, shards).to(dtype)
            else:
                merged = torch.empty(layout.merged_shape(mg_name, kind), dtype=dtype, device=device)
            if pp_ranks is not None:
                dist.broadcast(merged, src=pp_ranks[stage], group=pp_group)
            yield from megatron_to_hf(kind, merged, hf_names, layout)
            del merged


# ---- Lazy HF checkpoint -------------------------------------------------------------------


class HFCheckpoint(Mapping):
    """Read-only mapping over an HF folder's safetensors files that loads a tensor only
    when asked (so each rank reads just its own part of a 32B checkpoint)."""

    def __init__(self, folder: str, dtype: torch.dtype = None):
        from safetensors import safe_open

        self._dtype = dtype
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
        else:
            single = os.path.join(folder, "model.safetensors")
            if not os.path.exists(single):
                raise FileNotFoundError(f"no model.safetensors(.index.json) in {folder}")
            with safe_open(single, "pt") as f:
                weight_map = {k: "model.safetensors" for k in f.keys()}
        self._files = {name: os.path.join(folder, file) for name, file in weight_map.items()}
        self._open = {}

    def __getitem__(self, name):
        from safetensors import safe_open

        if name == "lm_head.weight" and name not in self._files:
            name = "model.embed_tokens.weight"  # tied checkpoints often omit lm_head
        path = self._files[name]
        if path not in self._open:
            self._open[path] = safe_open(path, "pt")
        tensor = self._open[path].get_tensor(name)
        return tensor.to(self._dtype) if self._dtype is not None else tensor

    def __iter__(self):
        return iter(self._files)

    def __len__(self):
        return len(self._files)
