"""CPU stand-ins for the CUDA-only calls Megatron-Core 0.16.1 makes, for gloo runs.

Installed only when torch has no CUDA device (`install()` checks), so on a GPU machine
Megatron runs exactly as upstream. `openrlhf_speed.compat.install()` runs first and already
covers the generic `torch.cuda` calls (`current_device()` -> the CPU device, which Megatron
passes as `device=`; `synchronize`/`empty_cache`/`set_device` -> no-ops). On top of it
Megatron needs:

- a model-parallel RNG tracker on the CPU generator: Megatron's tracker stores CUDA
  generator states (`torch.cuda.get_rng_state`) and forks them around every attention
  dropout and GPU-side weight init;
- `device="cuda"` literals in a handful of modules (causal mask, pipeline schedules'
  token counter, grad-norm/optimizer scalars): each of those modules sees a `torch` whose
  tensor factories map "cuda" to "cpu";
- `Tensor.cuda()` (tied-embedding sync across pipeline stages, optimizer state load,
  `broadcast_data`): on a build without CUDA it can only raise, so it keeps the tensor where
  it is.

The maths is device-neutral; none of this changes a number.
"""

import contextlib
import importlib

import torch

_CPU = torch.device("cpu")

# Modules whose functions create tensors with a literal device="cuda" (see module docstring).
_CUDA_LITERAL_MODULES = (
    "megatron.core.transformer.utils",  # get_default_causal_mask
    "megatron.core.pipeline_parallel.schedules",  # total_num_tokens counter
    "megatron.core.optimizer.clip_grads",  # grad norm / zero count scalars
    "megatron.core.optimizer.optimizer",  # found_inf, scale scalars
    "megatron.core.optimizer.grad_scaler",
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.tensor_parallel.data",  # broadcast_data sizes
    "megatron.core.utils",
)
_FACTORIES = frozenset(
    {"tensor", "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint"}
)

_installed = False


def _cpu_if_cuda(device):
    if device is None:
        return None
    if isinstance(device, int) or torch.device(device).type == "cuda":
        return _CPU
    return device


class _TorchOnCpu:
    """Stands in for `torch` inside one Megatron module: every attribute is torch's, except
    that tensor factories put a tensor asked for on "cuda" on the CPU instead."""

    def __getattr__(self, name):
        attr = getattr(torch, name)
        if name not in _FACTORIES:
            return attr

        def factory(*args, device=None, **kwargs):
            return attr(*args, device=_cpu_if_cuda(device), **kwargs)

        return factory


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    # The only device a CPU-only torch has is the CPU: keep the tensor where it is.
    return self


def _make_cpu_tracker_class(base):
    """Megatron's tracker keeps named CUDA generator states; this one keeps CPU ones and
    swaps them into the CPU default generator for the duration of a `fork`."""

    class CpuRNGStatesTracker(base):
        def add(self, name, seed):
            self._is_initialized = True
            if seed in self.seeds_:
                raise Exception(f"seed {seed} already exists")
            if name in self.states_:
                raise Exception(f"rng state {name} already exists")
            self.seeds_.add(seed)
            self.states_[name] = torch.Generator().manual_seed(seed).get_state()

        @contextlib.contextmanager
        def fork(self, name="model-parallel-rng"):
            if name not in self.states_:
                raise Exception(f"rng state {name} is not added")
            outer = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(outer)

    return CpuRNGStatesTracker


def _patch_rng(random_module):
    base = random_module.CudaRNGStatesTracker
    if getattr(base, "_cpu_shim", False):
        return
    tracker_cls = _make_cpu_tracker_class(base)
    tracker_cls._cpu_shim = True
    # `initialize_rng_tracker` instantiates the class found under this module-level name.
    random_module.CudaRNGStatesTracker = tracker_cls
    random_module.initialize_rng_tracker(force_reset=True)
    # Activation recomputation saves/restores the "CUDA" state through these two.
    random_module._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    random_module._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)


def install() -> bool:
    """Install the shims when torch has no CUDA device; returns whether they are active.
    Idempotent; call before building a Megatron model."""
    global _installed
    import openrlhf_speed.compat as compat

    compat.install()
    if not compat.cpu_mode():
        return False
    if _installed:
        return True
    from megatron.core.tensor_parallel import random as mp_random

    _patch_rng(mp_random)
    proxy = _TorchOnCpu()
    for name in _CUDA_LITERAL_MODULES:
        importlib.import_module(name).torch = proxy
    torch.Tensor.cuda = _tensor_cuda
    _installed = True
    return True
