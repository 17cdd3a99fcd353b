# Two commands set everything up on a fresh machine with Python 3.11+:
#   make demo   records agent runs into ./demo-store and prints what tplog derives from them
#   make test   lints (ruff, mypy --strict) and runs the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,pydantic-ai]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python tools/demo.py ./demo-store

test: lint
	$(BIN)/python -m pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check tplog tests benchmarks tools
	$(BIN)/mypy --strict tplog

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks.suite

clean:
	rm -rf $(VENV) demo-store .pytest_cache .coverage .coverage.*
