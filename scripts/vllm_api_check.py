"""Every vLLM name that OpenRLHF 0.11.2's engine wrapper (openrlhf/trainer/ray/vllm_engine.py,
vllm_worker_wrap.py, utils/distributed_util.py) and this project (rollout/, cli/replay.py,
memory/parts.py) use, checked against the installed vLLM: the name exists, and each
keyword they pass is a parameter (or a field, for the engine arguments). Prints one line per
name that is missing or changed, and `vllm X: every name ...` when none is.

    python scripts/vllm_api_check.py

scripts/gpu_driver_check.sh runs it first, against the vLLM carried to a lent GPU machine, so a
release that renamed something stops the lease at once with the name, not an hour in.
"""

import dataclasses
import importlib
import inspect
import sys

# (module, attribute path, keywords it is called with or fields it must have)
NAMES = [
    ("vllm", "AsyncEngineArgs", ["model", "enforce_eager", "worker_extension_cls", "tensor_parallel_size", "seed",
                                 "distributed_executor_backend", "max_model_len", "enable_prefix_caching", "dtype",
                                 "trust_remote_code", "gpu_memory_utilization", "enable_sleep_mode", "logprobs_mode",
                                 "max_logprobs", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"]),
    ("vllm", "AsyncLLMEngine.from_engine_args", ["engine_args"]),
    ("vllm", "AsyncLLMEngine.is_sleeping", []),
    ("vllm", "AsyncLLMEngine.collective_rpc", ["method", "args"]),
    ("vllm", "AsyncLLMEngine.reset_prefix_cache", []),
    ("vllm", "AsyncLLMEngine.pause_generation", ["mode"]),
    ("vllm", "AsyncLLMEngine.resume_generation", []),
    ("vllm", "AsyncLLMEngine.sleep", ["level"]),
    ("vllm", "AsyncLLMEngine.wake_up", ["tags"]),
    ("vllm", "AsyncLLMEngine.generate", ["prompt", "sampling_params", "request_id"]),
    ("vllm.v1.engine.output_processor", "OutputProcessor.get_num_unfinished_requests", []),
    ("vllm", "SamplingParams", ["n", "temperature", "top_p", "top_k", "max_tokens", "min_tokens", "logprobs",
                                "prompt_logprobs", "skip_special_tokens", "output_kind"]),
    ("vllm.sampling_params", "RequestOutputKind.FINAL_ONLY", []),
    ("vllm.inputs", "TokensPrompt", []),
    ("vllm.utils", "random_uuid", []),
    ("vllm", "LLM", ["model"]),
    ("vllm", "LLM.generate", []),
    ("vllm", "LLM.get_tokenizer", []),
    ("vllm.config", "SchedulerConfig.DEFAULT_MAX_NUM_SEQS", []),
    ("vllm.config", "VllmConfig", ["model_config", "scheduler_config", "cache_config"]),
    ("vllm.config", "SchedulerConfig", ["max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"]),
    ("vllm.config", "CacheConfig", ["enable_prefix_caching"]),
    ("vllm.distributed.device_communicators.pynccl", "PyNcclCommunicator", ["group", "device"]),
    ("vllm.distributed.utils", "StatelessProcessGroup.create", ["host", "port", "rank", "world_size"]),
    ("vllm.v1.worker.gpu_worker", "Worker", []),
]


def resolve(module: str, path: str):
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def accepts(obj, keywords: list) -> list:
    """The keywords `obj` does not take: a dataclass's fields, else its signature's parameters
    (any keyword when it takes **kwargs)."""
    if dataclasses.is_dataclass(obj):
        names = {f.name for f in dataclasses.fields(obj)}
    else:
        params = inspect.signature(obj).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return []
        names = {p.name for p in params}
    return [k for k in keywords if k not in names]


def problems() -> list:
    out = []
    for module, path, keywords in NAMES:
        try:
            obj = resolve(module, path)
        except (ImportError, AttributeError) as e:
            out.append(f"{module}.{path}: missing ({type(e).__name__}: {e})")
            continue
        lacking = accepts(obj, keywords) if keywords else []
        if lacking:
            out.append(f"{module}.{path}: no {', '.join(lacking)}")
    return out


def main() -> int:
    import vllm

    found = problems()
    for line in found:
        print(f"vllm_api_check: {line}", file=sys.stderr)
    if found:
        print(f"vllm_api_check: error: vllm {vllm.__version__} lacks {len(found)} name(s) OpenRLHF's engine wrapper "
              "or this project uses (above)", file=sys.stderr)
        return 1
    print(f"vllm {vllm.__version__}: every name OpenRLHF's engine wrapper and this project use is there "
          f"({len(NAMES)} checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
