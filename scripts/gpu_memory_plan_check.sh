#!/usr/bin/env bash
# The memory plan checked on one GPU, in one call of about 8 minutes: the 7 cases of
# tests/backends/test_memory_plan_gpu.py (DeepSpeed ZeRO-3 with and without Adam offload at
# 0.5B and 1.5B, Megatron TP 1 at 0.5B and 1.5B, the 7B activations), each measured peak
# against the plan's figure, then one table of the figures and the step time per token.
#
# For a machine with torch and CUDA but not this project's venv (a bare GPU image): what it
# lacks comes as wheels in .whl/ at the repository root (git-ignored), made where pip
# reaches PyPI:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     openrlhf==0.11.2 megatron-core==0.16.1 pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 \
#     typing-inspection==0.4.5 hjson==3.1.0 torchdata==0.11.0 pylatexenc==2.11
#   pip download --no-deps --no-binary=:all: -d .whl deepspeed==0.19.6
# (the import closure of OpenRLHF's Actor and DeepspeedStrategy, DeepSpeed and Megatron-Core
# beyond torch, transformers and peft). DeepSpeed installs without its ops; the first cases
# compile cpu_adam and fused_adam, both at the start, side by side. Where the venv is there
# (make setup-gpu), VENV=.venv-gpu skips the wheels; SITE=DIR takes packages installed there
# already (scripts/gpu_driver_check.sh's carry), PYTHON the interpreter (python3).
#
#   bash scripts/gpu_memory_plan_check.sh            # writes $OUT (default /tmp/memory_plan_check)
#   CASES='8192 or 2048' bash scripts/gpu_memory_plan_check.sh   # a pytest -k selection of the cases
#   CASES=megatron BUILD_OPS=0 bash scripts/gpu_memory_plan_check.sh   # the Megatron cases alone, no Adam op builds
# Results: $OUT/results.jsonl (one record per case), $OUT/table.md, $OUT/log.txt, $OUT/device.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/memory_plan_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if [[ -n ${VENV:-} ]]; then
  PY=$VENV/bin/python
elif [[ -n ${SITE:-} ]]; then
  export PYTHONPATH=$SITE:$PWD
else
  ls .whl/*.whl >/dev/null 2>&1 || { echo "no .whl/ here: make the wheels as this script's header says, or set VENV" >&2; exit 1; }
  DS_BUILD_OPS=0 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --no-build-isolation \
    --upgrade --target /tmp/site .whl/*.whl .whl/*.tar.gz || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions} PYTHONUNBUFFERED=1
export MEMORY_PLAN_RESULTS=$OUT/results.jsonl
rm -f "$MEMORY_PLAN_RESULTS"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u +%F; $PY -c "import torch; print('torch', torch.__version__)"; } >"$OUT/device.txt" 2>&1

# DeepSpeed's Adam ops, compiled side by side (each case would otherwise wait for one).
build_op() {
  $PY -c "from openrlhf_speed import compat; compat.install(); compat.device.fix_deepspeed_arch_list()
from deepspeed.accelerator import get_accelerator; get_accelerator().create_op_builder('$1').load(verbose=False)"
}
# BUILD_OPS=0 skips them: the Megatron cases use neither (a minute saved on a short loan).
if [[ ${BUILD_OPS:-1} != 0 ]]; then
  start=$SECONDS
  build_op CPUAdamBuilder >"$OUT/build_cpu_adam.txt" 2>&1 &
  build_op FusedAdamBuilder >"$OUT/build_fused_adam.txt" 2>&1 &
  wait
  echo "Adam ops built in $((SECONDS - start)) s" | tee -a "$OUT/device.txt"
fi

timeout ${CHECK_TIMEOUT:-420} $PY -m pytest -m gpu -s -q -p no:cacheprovider ${CASES:+-k "$CASES"} tests/backends/test_memory_plan_gpu.py \
  2>&1 | tee "$OUT/log.txt"
status=${PIPESTATUS[0]}
$PY - "$MEMORY_PLAN_RESULTS" >"$OUT/table.md" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
print("| model | mode | rows x tokens | measured peak GiB (allocated) | reserved peak GiB | plan GiB | plan / measured | host RSS GiB (plan) | step s | s per token |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    m, p = r["measured"], r["plan"]
    compared = p["activations"] if r["mode"] == "activations" else p["peak"]
    peak = m["train_peak_gib"] - (m["states_gib"] if r["mode"] == "activations" else 0)
    host = f"{m['host_peak_rss_gib']:.1f} ({p['host']:.1f})" if "host" in p else f"{m['host_peak_rss_gib']:.1f}"
    held = " (held out)" if r.get("held_out") else ""
    reserved = f"{m['reserved_peak_gib']:.2f}" if "reserved_peak_gib" in m else "-"
    print(f"| {r['size']} | {r['mode']}{held} | {r['micro']} x {r['max_len']} | {peak:.2f} | {reserved} | {compared:.2f} | {r['plan_over_measured']:.2f} | {host} | "
          f"{sorted(m['step_s'])[len(m['step_s']) // 2]:.3f} | {m['s_per_token']:.2e} |")
EOF
cat "$OUT/table.md"
exit "$status"
