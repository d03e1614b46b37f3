# `make train` and `make test` each set up .venv on first use (scripts/bootstrap.sh, pinned CPU stack).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup train test test-fast test-extra test-all clean
setup:
	bash scripts/bootstrap.sh

train: setup
	bash examples/scripts/train_speed_rloo_smollm2_cpu.sh

# Default test run: unit + property tests and the short CPU end-to-end runs (slow marker).
test: setup
	$(PY) -m pytest -m "not e2e_long and not e2e_extra" -q

# Slower end-to-end runs (tiny benchmark, two-node Ray cluster): CI runs them after `make test`.
test-extra: setup
	$(PY) -m pytest -m "e2e_extra" -q

test-fast: setup
	$(PY) -m pytest -m "not slow and not e2e_long and not e2e_extra" -q

test-all: setup
	$(PY) -m pytest -q

clean:
	rm -rf runs .pytest_cache .hypothesis
