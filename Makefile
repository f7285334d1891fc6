# Two commands set everything up: `make quickstart` and `make test`.
# Both create .venv on first use. torch is installed first, on its own, so that the CPU
# build is the default; a GPU user installs a CUDA build of torch into .venv beforehand
# (see README: "GPU install") and the Makefile keeps it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check
# `make test EDITABLE=` installs axiom-rl as users do (`pip install .`, into site-packages) and
# tests that install: pytest runs from the venv, so the checkout's own directory is not imported.
EDITABLE ?= -e

.PHONY: quickstart test test-fast test-pythons lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.torch: | $(BIN)/python
	@$(BIN)/python -c "import torch" 2>/dev/null || $(PIP) install -q $(TORCH)
	@touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PIP) install -q $(EDITABLE) .
	@touch $@

# verl's wheel, downloaded, not installed: the suite runs its sandbox_fusion client (which needs
# only requests) against `axiom-rl sandbox serve`. Installed, verl would bring ray, vllm and more,
# and its wheel's top-level `tests` package would shadow ours.
$(VENV)/.installed-dev: pyproject.toml $(VENV)/.torch
	$(PIP) install -q $(EDITABLE) '.[dev]'
	$(PIP) download -q --no-deps 'verl==0.9.1' -d $(VENV)/wheels
	@touch $@ $(VENV)/.installed

quickstart: $(VENV)/.installed
	$(BIN)/axiom-rl quickstart

test: $(VENV)/.installed-dev
	$(BIN)/pytest -q

test-fast: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m "not slow"

# The torch-free parts (sandbox, verifier, tasks, rewards) on Python 3.10, 3.12 and 3.13.
test-pythons:
	.ci/other-pythons

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(VENV)/.installed-dev
	$(PIP) install -q -e '.[bench]'
	$(BIN)/python benchmarks/verify_throughput.py
	$(BIN)/python benchmarks/grpo_step.py
	$(BIN)/python benchmarks/overlap_verification.py
	$(BIN)/python benchmarks/length_buckets.py
	$(BIN)/python benchmarks/finished_rows.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache runs
