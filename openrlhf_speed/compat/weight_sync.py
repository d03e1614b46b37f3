"""Actor -> vLLM weight sync over gloo, for machines without NCCL or CUDA IPC.

OpenRLHF broadcasts every parameter from DeepSpeed rank 0 to all vLLM workers through a
"stateless" process group built by `openrlhf.utils.distributed_util.stateless_init_process_group`
(vLLM's PyNcclCommunicator), and the vLLM side allocates the receive buffer with
`device="cuda"`. On CPU we keep OpenRLHF's protocol and call order unchanged (actor announces
`update_weight(name, dtype, shape)` to each engine, then broadcasts) and swap only the two
CUDA-bound pieces:

- the group: a `ProcessGroupGloo` on its own TCPStore, independent of the default
  torch.distributed group of either side (the same isolation the NCCL version has);
- `WorkerWrap.update_weight`: receives into a CPU tensor. vLLM's CPU backend repacks linear
  weights for oneDNN after loading and drops the original parameters, so a lone
  `load_weights((name, w))` cannot land; instead the received tensors are held until the
  last parameter of the sync (OpenRLHF flags it with `empty_cache=True`) and then go through
  vLLM's own in-place `model_runner.reload_weights`, which restores the checkpoint layout,
  loads and repacks; then the LM head's packed copy is re-made too (`repack_cpu_embeddings`:
  vLLM's reload leaves it stale, which matters for tied embeddings).

gloo broadcasts bf16/fp16/fp32 directly (checked on torch 2.13; it refuses int16).
"""

from datetime import timedelta

import torch
import torch.distributed as dist

from .import_hooks import when_imported

SYNC_TIMEOUT = timedelta(minutes=30)


class GlooBroadcastGroup:
    """The subset of PyNcclCommunicator that OpenRLHF's weight sync uses: broadcast."""

    def __init__(self, master_address: str, master_port: int, rank: int, world_size: int):
        self.rank = rank
        self.world_size = world_size
        store = dist.TCPStore(
            master_address, int(master_port), world_size, is_master=(rank == 0), timeout=SYNC_TIMEOUT
        )
        self._store = store  # keep alive: the process group borrows it
        self._pg = dist.ProcessGroupGloo(store, rank, world_size, SYNC_TIMEOUT)

    def broadcast(self, tensor: torch.Tensor, src: int = 0, stream=None) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        self._pg.broadcast([tensor], opts).wait()


def stateless_init_process_group(master_address, master_port, rank, world_size, device=None):
    return GlooBroadcastGroup(master_address, master_port, rank, world_size)


def repack_cpu_embeddings(model) -> int:
    """Re-pack every vocabulary embedding's oneDNN GEMM handle from its current weight.

    vLLM's CPU backend computes logits with a packed copy of the LM head
    (`UnquantizedEmbeddingMethod.process_weights_after_loading` ->
    `dispatch_cpu_unquantized_gemm(layer, remove_weight=False)`), made at load time.
    `reload_weights` re-packs the linear layers but not that one, so with tied embeddings
    (SmolLM2) the engine kept sampling from the initial LM head while its input embedding
    was updated: measured, the engine's log-probs then match neither the new nor the old
    model (0.11 off after a 2e-3 perturbation of the embedding; 2e-5 with this re-pack).
    Returns how many modules were re-packed."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    count = 0
    for module in model.modules():
        if isinstance(module, VocabParallelEmbedding) and getattr(module, "weight", None) is not None:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            count += 1
    return count


def _cpu_update_weight(self, name, dtype, shape, empty_cache=False):
    assert dtype == self.model_config.dtype, f"mismatch dtype: src {dtype}, dst {self.model_config.dtype}"
    if getattr(self, "_model_update_with_ray", False):
        raise RuntimeError("--vllm.sync_with_ray is not supported on CPU; the CPU mode syncs over gloo")
    weight = torch.empty(shape, dtype=dtype)
    self._model_update_group.broadcast(weight, src=0)
    pending = self.__dict__.setdefault("_openrlhf_speed_pending", [])
    pending.append((name, weight))
    if empty_cache:  # the last parameter of this sync
        self.model_runner.reload_weights(weights_iterator=list(pending), is_checkpoint_format=True)
        repack_cpu_embeddings(self.model_runner.model)
        pending.clear()


def _patch_distributed_util(module):
    module.stateless_init_process_group = stateless_init_process_group


def _patch_worker_wrap(module):
    module.WorkerWrap.update_weight = _cpu_update_weight


def install() -> None:
    when_imported("openrlhf.utils.distributed_util", _patch_distributed_util)
    when_imported("openrlhf.trainer.ray.vllm_worker_wrap", _patch_worker_wrap)
