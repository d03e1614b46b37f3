"""The memory plan against one GPU: Qwen2.5 architectures with random bf16 weights (0.5B,
1.5B, 7B; nothing downloaded) trained as the recipes train them, one launch of
`memory_plan_worker.py` per case, each measured peak held to the plan's figure.

Cases: a DeepSpeed ZeRO-3 actor at the 7B recipes' micro-batch (2 x 4096 tokens, gradient
checkpointing) with Adam on the host and on the GPU, at 0.5B and 1.5B; the Megatron actor
at TP 1 (1 x 4096, full recompute); and at 7B, whose ZeRO-3 states do not fit one GPU
without offload and whose offloaded states (DeepSpeed's estimate, 170 GiB) do not fit a
128 GiB host, the activations alone (forward + backward over the weights, no optimizer).
The plan's bytes per logit (memory/arithmetic.py) were read off those seven; HELD_OUT are
layouts they were not fitted on (other row lengths and micro-batches), the check that the
figures carry over.
Goal: the plan within 15% of the measured peak (torch.cuda.max_memory_allocated, what the
plan counts without its runtime allowance); with offload the process's peak RSS at most the
plan's host figure. Every case appends its record to $MEMORY_PLAN_RESULTS (a JSON-lines
file, when set) before its checks, so a failing case still reports its figures;
scripts/gpu_memory_plan_check.sh runs them all on one GPU machine in one call.
"""

import json
import os
from pathlib import Path

import pytest
from _util import torchrun_ranks

WORKER = Path(__file__).with_name("memory_plan_worker.py")
TOLERANCE = 0.15
# In the order the device script needs them first: the 7B recipes' default placement first.
FITTED = [("1.5b", "deepspeed_offload", 2, 4096), ("1.5b", "deepspeed", 2, 4096), ("7b", "activations", 2, 4096),
          ("0.5b", "deepspeed_offload", 2, 4096), ("0.5b", "deepspeed", 2, 4096), ("1.5b", "megatron", 1, 4096),
          ("0.5b", "megatron", 1, 4096)]
HELD_OUT = [("1.5b", "deepspeed", 1, 8192), ("0.5b", "megatron", 2, 2048), ("7b", "activations", 1, 2048),
            ("1.5b", "megatron", 2, 2048), ("0.5b", "megatron", 1, 8192)]
# Measured held out and outside the goal, on the safe side (plan 28.08 GiB, peak 24.12: 1.16;
# benchmarks/gpu/memory_plan_h200_megatron): at 8,192 tokens the local spec's attention
# scores set the peak and take about 19.5 B each, not the 24 read off 4,096. Strict, so a
# refit that brings it within 15% has to drop this mark.
KNOWN_OVER = {("0.5b", "megatron", 1, 8192): "plan over the peak by 16%: attention scores' bytes at 8,192 tokens"}
CASES = [pytest.param(*c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_OVER[c])) if c in KNOWN_OVER else c
         for c in FITTED + HELD_OUT]


def _record(res: dict) -> None:
    print(json.dumps(res))  # the figures, for `pytest -s` on a GPU machine
    path = os.environ.get("MEMORY_PLAN_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(res) + "\n")


@pytest.mark.gpu
@pytest.mark.parametrize("size, mode, micro, max_len", CASES,
                         ids=[f"{s}-{m}-{b}x{n}" for s, m, b, n in FITTED + HELD_OUT])
def test_gpu_memory_plan_within_15_percent(tmp_path, size, mode, micro, max_len):
    pytest.importorskip("deepspeed" if mode.startswith("deepspeed") or mode == "activations" else "megatron.core")
    res = torchrun_ranks(WORKER, 1, tmp_path, "--size", size, "--mode", mode, "--micro", str(micro),
                         "--max_len", str(max_len), timeout=900)[0]
    res["held_out"] = (size, mode, micro, max_len) in HELD_OUT
    measured, plan = res["measured"], res["plan"]
    res["plan_over_measured"] = plan["peak"] / measured["train_peak_gib"]
    if mode == "activations":  # what the plan's activation figure must cover: the peak above the static part
        res["plan_over_measured"] = plan["activations"] / (measured["train_peak_gib"] - measured["states_gib"])
    if mode == "deepspeed_offload":
        res["host_plan_over_measured"] = plan["host"] / measured["host_peak_rss_gib"]
    _record(res)
    assert abs(res["plan_over_measured"] - 1) <= TOLERANCE, res
    if mode == "deepspeed_offload":
        assert res["host_plan_over_measured"] >= 1, res  # the host figure is an upper bound
