# make run   : set up .venv, train + test on the built-in synthetic data, print where results are
# make test  : set up .venv, lint (ruff, the import layers), type-check (mypy), build the docs, run the test suite

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/quickstart.yaml

# make test-heavy: the subprocess, signal and DDP tests kept out of the quick suite
# make test-slow:  the long tests (every documented training command, real servers)

.PHONY: run test test-heavy test-slow lint typecheck pytest docs bench clean setup

setup: $(STAMP)

# torch first, pinned: a bare `torch` requirement would pull a multi-GB build on some machines.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/skinet train --config $(CONFIG)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest

test: lint typecheck docs pytest

test-heavy: $(STAMP)
	$(BIN)/python -m pytest -m heavy

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) docs/_build .pytest_cache .mypy_cache .ruff_cache
