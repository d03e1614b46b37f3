"""CPU stand-ins for the CUDA-only calls OpenRLHF 0.11.2 makes on its Ray PPO path.

Installed only when torch has no CUDA device (see `compat.install`), so on a GPU machine
OpenRLHF runs exactly as upstream. Each shim turns a call that would raise "Torch not
compiled with CUDA enabled" into its CPU meaning:

- `torch.cuda.current_device()` -> `torch.device("cpu")`: OpenRLHF uses it as the target of
  `.to(device)` and `torch.tensor(..., device=...)` (actor/ref forward, replay buffer).
- `set_device`, `synchronize`, `empty_cache` -> no-ops; `current_stream()` -> None (only
  passed on to our gloo weight-sync group, which has no streams).
- `NaiveReplayBuffer.__init__` builds `torch.device(f"cuda:{current_device()}")`; it gets
  the CPU device instead.
- `DeepspeedStrategy.setup_distributed` builds its device mesh on "cuda"; on CPU the mesh
  is built on "cpu" (gloo).
"""

import torch

from .import_hooks import when_imported

_CPU = torch.device("cpu")


# One function object per attribute: torch._dynamo builds a table keyed by the function
# objects found under torch.cuda and refuses the same object under two names.
def _current_device():
    return _CPU


def _set_device(device):
    return None


def _synchronize(device=None):
    return None


def _empty_cache():
    return None


def _current_stream(device=None):
    return None


def _patch_torch_cuda():
    cuda = torch.cuda
    if getattr(cuda, "_openrlhf_speed_cpu_shims", False):
        return
    cuda.current_device = _current_device
    cuda.set_device = _set_device
    cuda.synchronize = _synchronize
    cuda.empty_cache = _empty_cache
    cuda.current_stream = _current_stream
    cuda._openrlhf_speed_cpu_shims = True


def _index_zero():
    return 0


def _patch_replay_buffer(module):
    cls = module.NaiveReplayBuffer
    real_init = cls.__init__
    if getattr(real_init, "_cpu_shim", False):
        return

    def __init__(self, *args, **kwargs):
        # current_device() is the CPU device here, which the f"cuda:{...}" string in the
        # upstream __init__ cannot take; give it an index for the duration of the call.
        saved = torch.cuda.current_device
        torch.cuda.current_device = _index_zero
        try:
            real_init(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = saved
        self.target_device = _CPU

    __init__._cpu_shim = True
    cls.__init__ = __init__


def _patch_device_mesh(module):
    real = module.init_device_mesh
    if getattr(real, "_cpu_shim", False):
        return

    def init_device_mesh(device_type, *args, **kwargs):
        return real("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    init_device_mesh._cpu_shim = True
    module.init_device_mesh = init_device_mesh


def install() -> None:
    _patch_torch_cuda()
    when_imported("openrlhf.trainer.ppo_utils.replay_buffer", _patch_replay_buffer)
    when_imported("openrlhf.utils.deepspeed.deepspeed", _patch_device_mesh)
