"""What bf16 costs on this CPU against float32: the figures behind `auto`'s choice
(compat/precision.py), as evidence docs/cpu.md reads (`<!--fig ...-->` markers).

    make bench-precision        # = python scripts/cpu_precision_bench.py benchmarks/cpu/<kind>

Measures, with every core torch may use and nothing else running (about a minute without
native bf16, where the bf16 cases are emulated on one thread):
- a 1024 x 1024 matmul, GFLOP/s in float32 and in bf16;
- one `Linear(576, 1536)` forward + backward on 1,392 rows (the embedded SmolLM2's MLP width
  at the default job's tokens a micro-batch), ms in float32 and under bf16 autocast.
Writes OUT/precision.json: the figures (medians of the timed repeats), the CPU's kind as the
Makefile's BENCH_KIND names it, torch's version and threads, the date.
"""

import datetime
import json
import os
import statistics
import sys
import time

import torch

from openrlhf_speed.compat.precision import cpu_precision, machine_kind


BUDGET_S = 20.0  # per case: emulated bf16 takes seconds a repeat, and a few repeats say enough


def _median_s(fn, repeats: int) -> float:
    fn()  # warm-up: first-call allocation and kernel selection
    times, start = [], time.perf_counter()
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > BUDGET_S:
            break
    return statistics.median(times)


def matmul_gflops(dtype: torch.dtype) -> float:
    a, b = torch.randn(1024, 1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype)
    return 2 * 1024**3 / _median_s(lambda: a @ b, 20) / 1e9


def linear_ms(autocast: bool) -> float:
    layer, x = torch.nn.Linear(576, 1536), torch.randn(1392, 576, requires_grad=True)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = layer(x)
        y.float().sum().backward()

    return 1000 * _median_s(step, 10)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: cpu_precision_bench.py OUT_DIR (e.g. benchmarks/cpu/avx512-nobf16)", file=sys.stderr)
        return 2
    out = argv[0]
    result = {"date": datetime.date.today().isoformat(), "machine": machine_kind(),
              "native_bf16": cpu_precision().native_bf16, "torch": torch.__version__,
              "threads": torch.get_num_threads()}
    for name, fn in (("matmul_gflops_fp32", lambda: matmul_gflops(torch.float32)),
                     ("matmul_gflops_bf16", lambda: matmul_gflops(torch.bfloat16)),
                     ("linear_ms_fp32", lambda: linear_ms(False)), ("linear_ms_bf16", lambda: linear_ms(True))):
        print(f"[precision] {name} ...", flush=True)
        result[name] = fn()
    result["linear_bf16_over_fp32"] = result["linear_ms_bf16"] / result["linear_ms_fp32"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "precision.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
