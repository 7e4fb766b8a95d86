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
# CPU build), the PostgreSQL store's client (psycopg) and Ray (the fleet study and the Ray
# executor). The server alone needs none of them, so `make run` skips them.
$(TORCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,torch,postgres,ray]'
	touch $(TORCH_STAMP)

## The main job on embedded defaults (`make run PORT=8123 HOST=127.0.0.1`).
PORT ?= 8000
HOST ?= 127.0.0.1
run: $(STAMP)
	$(BIN)/straggler-lens serve --preload-sample --host $(HOST) --port $(PORT)

## Lint, type-check and the whole test suite. The browser tests (tests/web) drive the system
## Chromium (`apt-get install chromium`; .ci/run installs it) through Playwright from the dev extra.
test: $(TORCH_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(TORCH_STAMP)
	for b in engine_bench speed_bench generate_bench diagnose_perf incidents_bench profiler_readers_bench server_bench accuracy; do \
		$(BIN)/python -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
