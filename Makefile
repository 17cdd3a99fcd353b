# Two commands set everything up on a fresh machine with Python 3.11+:
#   make demo   records agent runs into ./demo-store and prints what tplog derives from them
#   make test   runs the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench check clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,pydantic-ai]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python tools/demo.py ./demo-store

test: $(BIN)/.installed
	$(BIN)/python -m pytest

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks.suite

check: $(BIN)/.installed
	$(BIN)/python tools/check.py

clean:
	rm -rf $(VENV) demo-store .pytest_cache .coverage
