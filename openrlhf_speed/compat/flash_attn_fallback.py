"""Pure-torch stand-ins for the few flash_attn functions OpenRLHF imports at load time.

`openrlhf/models/ring_attn_utils.py` does `from flash_attn.bert_padding import ...` and
`from flash_attn.utils.distributed import all_gather` at module level, so without flash_attn
(it only builds against CUDA) OpenRLHF cannot even be imported. These functions are only
*called* on the ring-attention / packing paths, which the CPU mode does not use, but they
are written to be correct (tests compare them with reference loops).

Only `flash_attn.bert_padding` and `flash_attn.utils.distributed` exist here: OpenRLHF's
`log_probs_from_logits` tries `flash_attn.ops.triton.cross_entropy` and falls back to pure
torch on ImportError, which is what we want. The fallback is installed only when the real
flash_attn cannot be imported, so GPU machines with flash-attn keep the real kernels.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

import torch


def rearrange(tensor, pattern: str):
    """The two einops patterns OpenRLHF uses with these helpers ("b s ... -> (b s) ...")."""
    import einops  # openrlhf depends on einops; imported lazily to keep this module light

    return einops.rearrange(tensor, pattern)


def index_first_axis(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """tensor[indices] along dim 0: [total, ...] -> [len(indices), ...]."""
    return tensor[indices]


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask=None):
    """[B, S, ...] with mask [B, S] -> ([nnz, ...], indices, cu_seqlens, max_seqlen, seqused).

    Same return tuple as flash_attn 2.8's unpad_input (5 values).
    """
    all_masks = attention_mask if unused_mask is None else attention_mask + unused_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max().item()) if seqlens_in_batch.numel() else 0
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch, used_seqlens_in_batch


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of unpad_input: [nnz, ...] -> [batch, seqlen, ...] with zeros elsewhere."""
    out = torch.zeros(batch * seqlen, *hidden_states.shape[1:], dtype=hidden_states.dtype, device=hidden_states.device)
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])


def all_gather(input_: torch.Tensor, process_group) -> torch.Tensor:
    """Concatenate each rank's tensor along dim 0 (flash_attn.utils.distributed.all_gather)."""
    world = torch.distributed.get_world_size(process_group)
    out = torch.empty(world * input_.shape[0], *input_.shape[1:], dtype=input_.dtype, device=input_.device)
    torch.distributed.all_gather_into_tensor(out, input_.contiguous(), group=process_group)
    return out


_MODULES = {
    "flash_attn": {},
    "flash_attn.bert_padding": {
        "index_first_axis": index_first_axis,
        "pad_input": pad_input,
        "unpad_input": unpad_input,
        "rearrange": rearrange,
    },
    "flash_attn.utils": {},
    "flash_attn.utils.distributed": {"all_gather": all_gather},
}


class _FallbackLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        module.__dict__.update(_MODULES[module.__name__])
        module.__openrlhf_speed_fallback__ = True
        if module.__name__ in ("flash_attn", "flash_attn.utils"):
            module.__path__ = []  # a package, so submodules resolve through the finder


class _FallbackFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MODULES:
            return None
        is_pkg = fullname in ("flash_attn", "flash_attn.utils")
        return importlib.machinery.ModuleSpec(fullname, _FallbackLoader(), is_package=is_pkg)


def real_flash_attn_available() -> bool:
    module = sys.modules.get("flash_attn")
    if module is not None:
        return not getattr(module, "__openrlhf_speed_fallback__", False)
    return importlib.util.find_spec("flash_attn") is not None


def install() -> bool:
    """Serve flash_attn from here when the real package is missing. Returns True if installed."""
    if any(isinstance(f, _FallbackFinder) for f in sys.meta_path):
        return True
    if real_flash_attn_available():
        return False
    # Appended, not prepended: a real flash_attn installed later in the session still wins.
    sys.meta_path.append(_FallbackFinder())
    return True
