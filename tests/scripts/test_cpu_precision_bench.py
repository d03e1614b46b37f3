"""scripts/cpu_precision_bench.py: the evidence docs/cpu.md's bf16 table is built from, and
the one definition of a CPU kind that names published folders."""

import importlib.util
import json

import torch
from _util import REPO

from openrlhf_speed.compat import precision
from openrlhf_speed.compat.precision import cpu_precision, machine_kind


def _script():
    spec = importlib.util.spec_from_file_location("cpu_precision_bench", REPO / "scripts" / "cpu_precision_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_kind_is_torchs_capability_and_says_when_avx512_lacks_bf16(monkeypatch):
    cap = torch.backends.cpu.get_cpu_capability().lower()
    amx = "amx_bf16" in precision._cpu_flags("/proc/cpuinfo")
    for switch in ("0", "1"):
        monkeypatch.setenv("OPENRLHF_SPEED_CPU_BF16", switch)
        expected = cap + ("-nobf16" if cap == "avx512" and switch == "0" else "-amx" if amx and switch == "1" else "")
        assert machine_kind() == expected


def test_amx_is_a_kind_of_its_own_since_its_bf16_figures_are_not_avx512_bf16s(tmp_path, monkeypatch):
    # The published `avx512` benchmarks ran on AVX512_BF16 without AMX; an AMX host publishing
    # into the same folder would overwrite them with figures that do not compare.
    monkeypatch.delenv("OPENRLHF_SPEED_CPU_BF16", raising=False)
    monkeypatch.setattr(precision, "_isa", lambda: "AVX512")
    kinds = {}
    for name, flags in (("zen4", "fpu avx2 avx512f avx512_bf16"), ("sapphire", "avx2 avx512f avx512_bf16 amx_tile amx_bf16"),
                        ("skylake", "avx2 avx512f"), ("amx_int8_only", "avx512f amx_tile amx_int8")):
        (tmp_path / name).write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        kinds[name] = machine_kind(str(tmp_path / name))
    assert kinds == {"zen4": "avx512", "sapphire": "avx512-amx", "skylake": "avx512-nobf16",
                     "amx_int8_only": "avx512-nobf16"}
    monkeypatch.setenv("OPENRLHF_SPEED_CPU_BF16", "0")  # float32 forced: AMX's bf16 is not used
    assert machine_kind(str(tmp_path / "sapphire")) == "avx512-nobf16"


def test_it_writes_every_figure_with_the_machine_it_came_from(tmp_path, monkeypatch):
    bench = _script()
    monkeypatch.setattr(bench, "BUDGET_S", 0.0)  # one timed repeat a case: the figures' shape, not their values
    assert bench.main([str(tmp_path / "kind")]) == 0
    result = json.loads((tmp_path / "kind" / "precision.json").read_text())
    assert result["machine"] == machine_kind() and result["native_bf16"] == cpu_precision().native_bf16
    for key in ("matmul_gflops_fp32", "matmul_gflops_bf16", "linear_ms_fp32", "linear_ms_bf16"):
        assert result[key] > 0, key
    assert result["linear_bf16_over_fp32"] == result["linear_ms_bf16"] / result["linear_ms_fp32"]
    assert bench.main([]) == 2  # no folder: the usage line, nothing written
