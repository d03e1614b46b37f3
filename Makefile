# `make train` and `make test` each set up .venv on first use (scripts/bootstrap.sh, pinned CPU stack).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-gpu check-gpu-setup check-gpu-resolve test-gpu train proving bench-proving test test-fast test-extra test-all clean
setup:
	bash scripts/bootstrap.sh

# The CUDA stack in its own venv (VENV_GPU, default .venv-gpu): torch 2.13.0 (CUDA), vLLM,
# DeepSpeed, OpenRLHF, Megatron-Core; flash-attn and transformer-engine when they build
# (FLASH_ATTN / TE = auto | 1 | 0, see scripts/bootstrap.sh) and DeepSpeed's Adam ops
# (DS_ADAM = 1 | 0); needs nvcc 13.x, gcc/g++ and python3.11-dev. check-gpu-setup prints what
# it would build and how long flash-attn takes, installing nothing. Recipes: VENV=.venv-gpu bash ...
VENV_GPU ?= .venv-gpu
setup-gpu:
	VENV=$(VENV_GPU) bash scripts/bootstrap.sh --gpu

check-gpu-setup:
	bash scripts/bootstrap.sh --gpu --check

# pip's resolver, dry run, against the CUDA requirement set (needs PyPI; 2-3 minutes; no install).
# Any Python 3.11 with pip runs it (PYTHON, default python3.11): no venv is built for it.
PYTHON ?= python3.11
check-gpu-resolve:
	$(PYTHON) scripts/check_gpu_resolve.py

train: setup
	bash examples/scripts/train_speed_rloo_smollm2_cpu.sh

# The proving-ground model ships with the package; `proving` rebuilds it and compares with the shipped one.
proving: setup
	$(VENV)/bin/openrlhf-speed proving-ground build

# The proving benchmark; --publish copies results.json, summary.md and accuracy.png into docs/,
# and the runs' evidence into docs/bench_proving/. BENCH_ARGS adds flags: `make bench-proving
# BENCH_ARGS=--resume` goes on with a stopped one (on a new machine: cp -r docs/bench_proving runs/ first).
BENCH_ARGS ?=
bench-proving: setup
	$(VENV)/bin/openrlhf-speed bench --mode proving --out runs/bench_proving --publish docs $(BENCH_ARGS)

# Default test run: unit + property tests and the short CPU end-to-end runs (slow marker).
test: setup
	$(PY) -m pytest -m "not e2e_long and not e2e_extra" -q

# Slower end-to-end runs (two algorithm steps, the proving-ground benchmark at CI size, two-node Ray cluster, Megatron step): CI runs them after `make test`.
test-extra: setup
	$(PY) -m pytest -m "e2e_extra" -q

test-fast: setup
	$(PY) -m pytest -m "not slow and not e2e_long and not e2e_extra" -q

test-all: setup
	$(PY) -m pytest -q

# The tests that need a CUDA device (the DeepSpeed and Megatron actors on one GPU), in the GPU venv.
test-gpu:
	$(VENV_GPU)/bin/python -m pytest -m gpu -s -q tests/backends

clean:
	rm -rf runs .pytest_cache .hypothesis
