"""scripts/cpu_precision_bench.py: the evidence docs/cpu.md's bf16 table is built from, and
the one definition of a CPU kind that names published folders."""

import importlib.util
import json

import torch
from _util import REPO

from openrlhf_speed.compat.precision import cpu_precision, machine_kind


def _script():
    spec = importlib.util.spec_from_file_location("cpu_precision_bench", REPO / "scripts" / "cpu_precision_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_kind_is_torchs_capability_and_says_when_avx512_lacks_bf16(monkeypatch):
    cap = torch.backends.cpu.get_cpu_capability().lower()
    for switch in ("0", "1"):
        monkeypatch.setenv("OPENRLHF_SPEED_CPU_BF16", switch)
        assert machine_kind() == cap + ("-nobf16" if cap == "avx512" and switch == "0" else "")


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
