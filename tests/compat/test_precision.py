"""`compat.precision`: the bf16-or-float32 decision on CPU, its switch, the flag and the
start-up line, and OpenRLHF's dtype conversion taught "fp32"."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from openrlhf_speed.compat import precision
from openrlhf_speed.compat.precision import ENV_SWITCH, cpu_precision, resolve_dtypes

AMD_AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
XEON_AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


def cpuinfo(tmp_path, text):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return str(path)


def test_cpu_flags_decide(tmp_path):
    assert not cpu_precision(cpuinfo(tmp_path, AMD_AVX2), env={}).native_bf16
    xeon = cpu_precision(cpuinfo(tmp_path, XEON_AMX), env={})
    assert xeon.native_bf16 and xeon.dtype == "bf16" and "amx_bf16, avx512_bf16" in xeon.reason
    assert cpu_precision(cpuinfo(tmp_path, GRAVITON3), env={}).native_bf16
    # No /proc/cpuinfo (macOS): float32, which is always correct.
    missing = cpu_precision(str(tmp_path / "nothing"), env={})
    assert not missing.native_bf16 and missing.dtype == "fp32"


def test_switch_overrides_the_flags(tmp_path):
    forced_off = cpu_precision(cpuinfo(tmp_path, XEON_AMX), env={ENV_SWITCH: "0"})
    assert not forced_off.native_bf16 and forced_off.reason == f"{ENV_SWITCH}=0"
    assert cpu_precision(cpuinfo(tmp_path, AMD_AVX2), env={ENV_SWITCH: "1"}).native_bf16
    # Anything else is ignored: the flags decide.
    assert not cpu_precision(cpuinfo(tmp_path, AMD_AVX2), env={ENV_SWITCH: "yes"}).native_bf16


def make_args(param_dtype="auto", vllm_dtype="auto", backend="deepspeed", megatron_dtype="auto"):
    return SimpleNamespace(ds=SimpleNamespace(param_dtype=param_dtype), vllm=SimpleNamespace(dtype=vllm_dtype),
                           backend=backend, megatron=SimpleNamespace(dtype=megatron_dtype))


def test_auto_on_a_cpu_without_bf16_is_float32_everywhere(monkeypatch):
    monkeypatch.setenv(ENV_SWITCH, "0")
    args = make_args()
    lines = resolve_dtypes(args, cpu=True)
    assert (args.ds.param_dtype, args.vllm.dtype) == ("fp32", "float32")
    assert lines == [f"dtype: {ENV_SWITCH}=0: actor, reference and engines in float32"]


def test_auto_on_a_cpu_with_bf16_keeps_bf16(monkeypatch):
    monkeypatch.setenv(ENV_SWITCH, "1")
    args = make_args()
    resolve_dtypes(args, cpu=True)
    assert (args.ds.param_dtype, args.vllm.dtype) == ("bf16", "bfloat16")


def test_gpu_behaviour_is_unchanged(monkeypatch):
    # On GPU auto is OpenRLHF's bf16, whatever the CPU, and the engines keep OpenRLHF's own
    # dtype (no override reaches them): nothing printed.
    monkeypatch.setenv(ENV_SWITCH, "0")
    args = make_args()
    assert resolve_dtypes(args, cpu=False) == []
    assert (args.ds.param_dtype, args.vllm.dtype) == ("bf16", "auto")


def test_explicit_bf16_without_native_bf16_runs_with_a_warning(monkeypatch):
    monkeypatch.setenv(ENV_SWITCH, "0")
    args = make_args(param_dtype="bf16")
    lines = resolve_dtypes(args, cpu=True)
    assert args.ds.param_dtype == "bf16" and args.vllm.dtype == "float32"
    assert lines[0].endswith("engines in float32")
    assert lines[1].startswith("warning: --ds.param_dtype bf16 on a CPU without native bf16")
    assert "44x slower" in lines[1] and "auto" in lines[1]


def test_megatron_backend_names_its_own_dtype_flag(monkeypatch):
    monkeypatch.setenv(ENV_SWITCH, "0")
    args = make_args(backend="megatron", megatron_dtype="bf16")
    lines = resolve_dtypes(args, cpu=True)
    assert lines[0] == f"dtype: {ENV_SWITCH}=0: engines in float32"  # the actor's line comes from --megatron.dtype
    # Unused by the Megatron actor, and OpenRLHF's strategy asserts bf16 when tp * pp > 1.
    assert args.ds.param_dtype == "bf16"
    assert lines[1].startswith("warning: --megatron.dtype bf16")


def test_openrlhf_dtype_conversion_learns_fp32():
    from openrlhf.utils import utils

    precision.install()
    assert utils.convert_to_torch_dtype("fp32") is torch.float32
    assert utils.convert_to_torch_dtype("bf16") is torch.bfloat16  # OpenRLHF's own answer kept
    with pytest.raises(ValueError):
        utils.convert_to_torch_dtype("fp64")


def test_param_dtype_flag_through_the_real_parser():
    # OpenRLHF's own parser, extended at the parse_args seam as `openrlhf-speed train` does.
    code = (
        "import argparse, sys\n"
        "from openrlhf_speed.cli import flags\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--ds.param_dtype', type=str, default='bf16', choices=['bf16', 'fp16'])\n"
        "flags.add_arguments(p)\n"
        "print(getattr(p.parse_args([]), 'ds.param_dtype'), getattr(p.parse_args(['--ds.param_dtype', 'fp32']), 'ds.param_dtype'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["auto", "fp32"]
