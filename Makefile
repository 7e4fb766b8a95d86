# Everything runs from a virtual environment that this Makefile creates itself.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_STAMP := $(VENV)/.installed-torch

.PHONY: run test lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The tests also run the real example training job, which needs the torch extra (torch==2.13.0,
# CPU build). The server alone does not, so `make run` skips it.
$(TORCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,torch]'
	touch $(TORCH_STAMP)

## The main job on embedded defaults (`make run PORT=8123 HOST=127.0.0.1`).
PORT ?= 8000
HOST ?= 127.0.0.1
run: $(STAMP)
	$(BIN)/straggler-lens serve --preload-sample --host $(HOST) --port $(PORT)

## Lint, type-check and the whole test suite.
test: $(TORCH_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(TORCH_STAMP)
	for b in engine_bench generate_bench diagnose_perf incidents_bench profiler_readers_bench server_bench accuracy; do \
		$(BIN)/python -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
