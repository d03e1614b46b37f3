# `make train` and `make test` each set up .venv on first use (scripts/bootstrap.sh, pinned CPU stack).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: train-smollm2 bench-regime bench-precision setup setup-gpu wheelhouse wheelhouse-cpu check-gpu-setup check-gpu-resolve test-gpu train proving bench-proving bench-proving-v4 soak scale test test-fast test-extra test-all clean
# WHEELHOUSE=DIR (setup, setup-gpu): install from that folder alone, pip --no-index, for a node
# that reaches no package index; what it lacks is refused first, one line a pin.
WHEELHOUSE ?=
setup:
	WHEELHOUSE=$(WHEELHOUSE) bash scripts/bootstrap.sh

# The CUDA stack in its own venv (VENV_GPU, default .venv-gpu): torch 2.13.0 (CUDA), vLLM,
# DeepSpeed, OpenRLHF, Megatron-Core; flash-attn and transformer-engine when they build
# (FLASH_ATTN / TE = auto | 1 | 0, see scripts/bootstrap.sh) and DeepSpeed's Adam ops
# (DS_ADAM = 1 | 0); needs nvcc 13.x, gcc/g++ and python3.11-dev. check-gpu-setup prints what
# it would build and how long flash-attn takes, installing nothing. Recipes: VENV=.venv-gpu bash ...
VENV_GPU ?= .venv-gpu
setup-gpu:
	VENV=$(VENV_GPU) WHEELHOUSE=$(WHEELHOUSE) bash scripts/bootstrap.sh --gpu

# Every wheel and sdist of the pinned GPU stack (wheelhouse-cpu: the CPU stack) in one folder,
# WHEELHOUSE (default wheelhouse/, wheelhouse-cpu/; git-ignored), then its MANIFEST.txt. Run it
# where pip reaches an index, with the nodes' Python 3.11 on Linux x86-64 (PYTHON); copy the
# folder to the node and run `make setup-gpu WHEELHOUSE=DIR` there (scripts/wheelhouse.py).
wheelhouse:
	$(PYTHON) scripts/wheelhouse.py --stack gpu $(or $(WHEELHOUSE),wheelhouse)

wheelhouse-cpu:
	$(PYTHON) scripts/wheelhouse.py --stack cpu $(or $(WHEELHOUSE),wheelhouse-cpu)

check-gpu-setup:
	bash scripts/bootstrap.sh --gpu --check

# pip's resolver, dry run, against the CUDA requirement set (needs PyPI; 2-3 minutes; no install).
# Any Python 3.11 with pip runs it (PYTHON, default python3.11): no venv is built for it.
PYTHON ?= python3.11
check-gpu-resolve:
	$(PYTHON) scripts/check_gpu_resolve.py

# The default job: SPEED on the shipped proving-ground model, held-out accuracy before and after
# (minutes on 2 cores); train-smollm2: the embedded SmolLM2-135M-Instruct on generated arithmetic.
train: setup
	OPENRLHF_SPEED_RERUN="make train" bash examples/scripts/train_speed_rloo_proving_cpu.sh

train-smollm2: setup
	bash examples/scripts/train_speed_rloo_smollm2_cpu.sh

# The proving-ground model ships with the package; `proving` rebuilds it and compares with the shipped one.
proving: setup
	$(VENV)/bin/openrlhf-speed proving-ground build

# The proving benchmark on proving ground v5 (100 steps, the paper's regime). --publish copies
# results.json and the runs' evidence (bench.json, each run's metrics.jsonl) into
# benchmarks/proving-v5/$(BENCH_KIND), --publish_docs the report (summary.md and the plots) into
# docs/proving-v5/$(BENCH_KIND); BENCH_KIND is the CPU kind torch dispatches to (avx2, avx512), since
# each kind's table stands on its own. BENCH_ARGS adds flags: `make bench-proving BENCH_ARGS=--resume`
# goes on with a stopped one. bench-proving-v4 is the published v4 table (30 steps): on a new machine,
# mkdir -p runs && cp -r benchmarks/proving-v4/avx2 runs/bench_proving first, then BENCH_ARGS=--resume.
BENCH_ARGS ?=
# avx2, avx512 (with AVX512_BF16, the published v4/v5 kind), avx512-amx (bf16 on AMX tiles: its own
# figures) or avx512-nobf16 (AVX512 without native bf16).
BENCH_KIND ?= $(shell $(PY) -c "from openrlhf_speed.compat.precision import machine_kind; print(machine_kind())" 2>/dev/null)
# What bf16 costs against float32 on this CPU (docs/cpu.md's table), a minute or so.
bench-precision: setup
	$(PY) scripts/cpu_precision_bench.py benchmarks/cpu/$(BENCH_KIND)
bench-proving: setup
	$(VENV)/bin/openrlhf-speed bench --mode proving --out runs/bench_proving_v5 --publish benchmarks/proving-v5/$(BENCH_KIND) \
		--publish_docs docs/proving-v5/$(BENCH_KIND) $(BENCH_ARGS)

bench-proving-v4: setup
	$(VENV)/bin/openrlhf-speed bench --mode proving-v4 --out runs/bench_proving --publish benchmarks/proving-v4/$(BENCH_KIND) \
		--publish_docs docs/proving-v4/$(BENCH_KIND) $(BENCH_ARGS)

# The regime map's cells (docs/benchmarks.md, "The regime map"): CELL = high-b4, high or low, each
# `off` calibration first (BENCH_ARGS="--curricula off"), then every curriculum seed by seed with
# --resume. With --max_runs 1 each sitting is one run and publishes it, so a cell spans days and
# machines of its kind (cp -r benchmarks/regime/$(CELL)/$(BENCH_KIND) runs/regime/$(CELL), then
# --resume); `openrlhf-speed regime-map` takes a cell once every planned run is finished.
CELL ?= high-b4
bench-regime: setup
	$(VENV)/bin/openrlhf-speed bench --mode proving-$(CELL) --out runs/regime/$(CELL) --publish benchmarks/regime/$(CELL)/$(BENCH_KIND) \
		--publish_docs docs/regime/$(CELL)/$(BENCH_KIND) $(BENCH_ARGS)

# Long-run checks, not in CI. soak: 1,000 steps each of speed, greso and speed_bayes on the proving
# model, recorded every 50 steps and checked for growth (hours on 2 cores; rerun to go on after a stop).
# scale: a 400,000-prompt run's start-up, 5 steps, checkpoint and resume against their budgets.
SOAK_ARGS ?=
soak: setup
	$(VENV)/bin/openrlhf-speed soak --out runs/soak --publish benchmarks/soak --publish_docs docs/soak $(SOAK_ARGS)

SCALE_ARGS ?=
scale: setup
	$(VENV)/bin/openrlhf-speed scale --out runs/scale --publish benchmarks/scale --publish_docs docs/scale $(SCALE_ARGS)

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
