"""Resumable checkpoints and HF export for the Megatron backend (`model.py`'s GPTModel).

A checkpoint tag (`save_checkpoint` / `load_checkpoint`) is one folder:

    <ckpt_dir>/latest                         the newest complete tag (a one-line text file)
    <ckpt_dir>/<tag>/model/                   Megatron-Core distributed checkpoint (torch_dist)
    <ckpt_dir>/<tag>/optim/mp_rank_TT_PPP.pt  optimizer state + RNG of model-parallel rank (TT, PPP)
    <ckpt_dir>/<tag>/trainer_state.pt         client states, LR scheduler, the layout saved at

- Model: `dist_checkpointing.save({"model": model.sharded_state_dict()})`, the layout and the
  tensor keys Megatron-LM itself writes ("decoder.layers.self_attention.linear_qkv.weight",
  layers stacked along a leading axis), so Megatron-LM tools can read it. It works on CPU
  with gloo as it does on GPU. Because every tensor is stored as a global tensor, the model
  part loads at any TP/PP size (checked: TP=2 <-> PP=2), as long as the padded vocabulary
  is the same (`vocab_divisible_by`, see `model.py`), and under the local or the TE layer
  spec alike (Megatron's sharded keys are TE's names for both).
- Optimizer: the caller's plain torch optimizer holds per-rank shards of TP/PP-split
  parameters, which do not reshard; data-parallel rank 0 of each model-parallel rank
  writes its `state_dict()` (every DP replica holds the same state). Loading it at another
  TP/PP size is refused with a message; `load_checkpoint(..., optimizer=None)` loads the
  model alone at any layout. The RNG states (torch, CUDA, Megatron's model-parallel
  tracker) go with it, so every DP replica resumes with DP rank 0's.
- Atomicity: everything is written to the hidden `.<tag>.partial`, every rank meets a
  barrier, then global rank 0 renames it to `<tag>` and replaces `latest` (write + fsync +
  os.replace): a crash at any point leaves `latest` naming the previous complete tag.
  Re-saving an existing tag swaps the two folders with renames; only a crash between
  those two renames leaves `latest` naming a missing folder.

`dist_checkpointing`'s writer starts a helper process with the "spawn" method, which
imports the launching script again: that script needs an `if __name__ == "__main__"` guard
(Ray's worker processes have one).

`export_hf` writes a Hugging Face folder from `weights.iter_hf_weights` one shard at a time.
"""

import copy
import json
import os
import shutil
from typing import Optional

import torch
import torch.distributed as dist

from openrlhf_speed.storage.atomic import replace_file

LATEST = "latest"
TRAINER_STATE = "trainer_state.pt"
FORMAT_VERSION = 1


# ---- small file helpers ---------------------------------------------------------------


def _torch_save_durable(obj, path: str) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _mp_name(tp_rank: int, pp_rank: int) -> str:
    return f"mp_rank_{tp_rank:02d}_{pp_rank:03d}.pt"  # Megatron's legacy per-rank naming


def _rng_state() -> dict:
    from megatron.core import tensor_parallel

    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
        "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }


def _set_rng_state(state: dict) -> None:
    from megatron.core import tensor_parallel

    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def _layout() -> dict:
    from megatron.core import parallel_state as ps

    return {
        "tp_size": ps.get_tensor_model_parallel_world_size(),
        "pp_size": ps.get_pipeline_model_parallel_world_size(),
        "dp_size": ps.get_data_parallel_world_size(),
    }


# ---- save ---------------------------------------------------------------------------------


def _publish(ckpt_dir: str, tag: str, partial: str, max_num: Optional[int]) -> None:
    """Global rank 0, after every rank has written `partial`: make it `<tag>`, point
    `latest` at it, drop the oldest tags beyond `max_num`."""
    final = os.path.join(ckpt_dir, tag)
    old = os.path.join(ckpt_dir, f".{tag}.old")
    if os.path.exists(final):
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(partial, final)
    replace_file(os.path.join(ckpt_dir, LATEST), lambda f: f.write(tag), text=True, durable=True)
    shutil.rmtree(old, ignore_errors=True)
    if max_num is None:
        return
    # Complete tags only (hidden partial/old folders have no marker at the top level),
    # oldest first by when their trainer state was written.
    markers = [os.path.join(ckpt_dir, d, TRAINER_STATE) for d in os.listdir(ckpt_dir) if not d.startswith(".")]
    complete = sorted((m for m in markers if os.path.isfile(m)), key=os.path.getmtime)
    for marker in complete[: max(0, len(complete) - max_num)]:
        if os.path.basename(os.path.dirname(marker)) != tag:  # never the one just written (clock skew)
            shutil.rmtree(os.path.dirname(marker))


def save_checkpoint(
    ckpt_dir: str, tag: str, model, optimizer, scheduler, client_states: dict, max_num: Optional[int] = 3
) -> str:
    """Write `<ckpt_dir>/<tag>` (see the module docstring) and point `latest` at it; a
    collective over all ranks. Keeps the newest `max_num` tags (None keeps all).
    Returns the tag's folder."""
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps

    if max_num is not None and max_num < 1:
        raise ValueError(f"max_num must be >= 1 (or None to keep every checkpoint), got {max_num}")
    if not tag or os.sep in tag or tag.startswith(".") or tag == LATEST:
        raise ValueError(f"checkpoint tag {tag!r} must be a plain folder name, not hidden and not {LATEST!r}")
    partial = os.path.join(ckpt_dir, f".{tag}.partial")
    model_dir = os.path.join(partial, "model")
    if dist.get_rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)  # left by a crash mid-save
        os.makedirs(model_dir)
    dist.barrier()
    # Collective over all ranks; each writes its own shards, rank 0 the metadata.
    dist_checkpointing.save({"model": model.sharded_state_dict()}, model_dir)

    tp_rank, pp_rank = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
    layout = _layout()
    if ps.get_data_parallel_rank() == 0:
        os.makedirs(os.path.join(partial, "optim"), exist_ok=True)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        state = {
            "optimizer": optimizer.state_dict(),
            "param_shapes": [tuple(p.shape) for p in params],
            "rng": _rng_state(),
            **layout,
        }
        _torch_save_durable(state, os.path.join(partial, "optim", _mp_name(tp_rank, pp_rank)))
    if dist.get_rank() == 0:
        trainer_state = {
            "format_version": FORMAT_VERSION,
            "client_states": client_states,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            **layout,
        }
        _torch_save_durable(trainer_state, os.path.join(partial, TRAINER_STATE))
    dist.barrier()  # every rank's files are on disk
    if dist.get_rank() == 0:
        _publish(ckpt_dir, tag, partial, max_num)
    dist.barrier()  # nobody returns (and, say, loads) before `latest` is in place
    return os.path.join(ckpt_dir, tag)


# ---- load ---------------------------------------------------------------------------------


def _read_latest(ckpt_dir: str) -> str:
    path = os.path.join(ckpt_dir, LATEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no Megatron checkpoint to resume from: {path} does not exist (save_checkpoint writes it once a "
            "checkpoint is complete). Point the checkpoint path at the folder that holds `latest`, or start "
            "without loading a checkpoint."
        )
    with open(path) as f:
        tag = f.read().strip()
    if not os.path.isfile(os.path.join(ckpt_dir, tag, TRAINER_STATE)):
        raise FileNotFoundError(
            f"{path} names the checkpoint {tag!r}, but {os.path.join(ckpt_dir, tag)} is missing or incomplete "
            "(deleted by hand?); write the tag of a complete checkpoint folder into it"
        )
    return tag


def _check_same_layout(saved: dict, folder: str) -> None:
    now = _layout()
    if (saved["tp_size"], saved["pp_size"]) != (now["tp_size"], now["pp_size"]):
        raise ValueError(
            f"{folder} was saved at TP={saved['tp_size']} PP={saved['pp_size']}, this run is TP={now['tp_size']} "
            f"PP={now['pp_size']}: the optimizer state is per model-parallel rank and does not reshard. Resume at "
            "the saved TP/PP, or load the model alone (optimizer=None) and start a fresh optimizer."
        )


def _check_same_params(saved: dict, optimizer, path: str) -> None:
    shapes = [tuple(p.shape) for group in optimizer.param_groups for p in group["params"]]
    if shapes != [tuple(s) for s in saved["param_shapes"]]:
        raise ValueError(
            f"{path}: the optimizer's parameters ({len(shapes)}) do not match the saved ones "
            f"({len(saved['param_shapes'])}) in order and shape; the model or its parameter groups changed"
        )


def load_checkpoint(ckpt_dir: str, model, optimizer=None, scheduler=None, tag: Optional[str] = None) -> dict:
    """Restore the tag named in `<ckpt_dir>/latest` (or `tag`); a collective over all ranks.
    Returns the saved client states. With `optimizer=None` only the model is loaded, at
    any TP/PP size; with an optimizer the TP/PP sizes must be the saved ones."""
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps

    tag = tag or _read_latest(ckpt_dir)
    folder = os.path.join(ckpt_dir, tag)
    trainer_state = torch.load(os.path.join(folder, TRAINER_STATE), map_location="cpu", weights_only=False)
    optim = None
    if optimizer is not None:  # checked before anything is modified
        path = os.path.join(folder, "optim", _mp_name(ps.get_tensor_model_parallel_rank(),
                                                       ps.get_pipeline_model_parallel_rank()))
        _check_same_layout(trainer_state, folder)
        optim = torch.load(path, map_location="cpu", weights_only=False)
        _check_same_params(optim, optimizer, path)

    state = dist_checkpointing.load({"model": model.sharded_state_dict()}, os.path.join(folder, "model"))
    model.load_state_dict(state["model"], strict=True)
    if optim is not None:
        optimizer.load_state_dict(optim["optimizer"])  # casts the state to each param's device
        _set_rng_state(optim["rng"])
    if scheduler is not None:
        if trainer_state["scheduler"] is None:
            raise ValueError(f"{folder} was saved without an LR scheduler; pass scheduler=None")
        scheduler.load_state_dict(trainer_state["scheduler"])
    return trainer_state["client_states"]


# ---- HF export ----------------------------------------------------------------------------


def _remove_old_weights(out_dir: str) -> None:
    # A stale model.safetensors would shadow a new sharded export (HF tries it first).
    for name in os.listdir(out_dir):
        if name.startswith("model") and name.endswith((".safetensors", ".safetensors.part", ".index.json")):
            os.remove(os.path.join(out_dir, name))


def export_hf(model, layout, out_dir: str, hf_config, tokenizer=None, dtype: Optional[torch.dtype] = None,
              shard_bytes: int = 2**30) -> None:
    """Write an HF folder (config, tokenizer, safetensors shards of at most `shard_bytes`
    unless one tensor is larger, plus `model.safetensors.index.json` when there are several).

    A collective over this rank's model-parallel group (TP x PP): call it on every rank, or
    on the ranks of data-parallel rank 0 only; other DP replicas return at once. The rank
    with tp = pp = dp = 0 writes, holding at most one shard in memory. Tied models export
    no `lm_head.weight` (`hf_config.tie_word_embeddings` must say so)."""
    from megatron.core import parallel_state as ps
    from safetensors.torch import save_file

    from .weights import iter_hf_weights

    if ps.get_data_parallel_rank() != 0:
        return
    writer = ps.get_tensor_model_parallel_rank() == 0 and ps.get_pipeline_model_parallel_rank() == 0
    dtype = dtype or next(model.parameters()).dtype
    if writer:
        os.makedirs(out_dir, exist_ok=True)
        _remove_old_weights(out_dir)
        config = copy.deepcopy(hf_config)
        config.dtype = dtype  # what the shards hold; `from_pretrained(dtype="auto")` reads it
        config.save_pretrained(out_dir)
        if tokenizer is not None:
            tokenizer.save_pretrained(out_dir)

    files, weight_map, total = [], {}, 0
    shard, shard_size = {}, 0

    def flush(shard):
        name = f"model-{len(files) + 1:05d}.safetensors.part"
        save_file(shard, os.path.join(out_dir, name), metadata={"format": "pt"})
        files.append(name)
        weight_map.update({k: name for k in shard})

    # Every rank runs the generator to the end: each tensor is a TP/PP collective.
    for name, tensor in iter_hf_weights(model, layout, dtype):
        if not writer:
            continue
        nbytes = tensor.numel() * tensor.element_size()
        if shard and shard_size + nbytes > shard_bytes:
            flush(shard)
            shard, shard_size = {}, 0
        shard[name] = tensor.to("cpu", copy=True)  # own storage: the generator may alias params
        shard_size += nbytes
        total += nbytes
    if writer:
        if shard:
            flush(shard)
        # Final names need the shard count, known only now.
        n = len(files)
        final = {f: "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
                 for i, f in enumerate(files)}
        for part, name in final.items():
            os.replace(os.path.join(out_dir, part), os.path.join(out_dir, name))
        if n > 1:
            index = {"metadata": {"total_size": total}, "weight_map": {k: final[v] for k, v in weight_map.items()}}
            with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
                json.dump(index, f, indent=2, sort_keys=True)
    if layout.tp_size * layout.pp_size > 1:
        dist.barrier(group=ps.get_model_parallel_group())  # the folder is complete on return
