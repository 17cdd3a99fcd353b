# Two commands set everything up on a fresh machine with Python 3.11+:
#   make demo   records agent runs into ./demo-store (replacing only one it made) and prints what tplog derives
#   make test   lints (ruff, mypy --strict) and runs the whole test suite (3 pytest-xdist workers) measuring branch coverage
#               of tplog/ (the Python processes the tests start included), failing under COV_FAIL_UNDER
#   make test-fast  the inner loop: no lint, no coverage, no PostgreSQL/chromium/Node/FUSE tests nor the slowest
#                   (markers pg, browser, node, fuse, slow: tests/conftest.py), on every core (pytest-xdist)
#   make test-lowest  the same suite against the lowest supported dependencies (CI runs both)
#   make mutation  mutation testing of the core, facade and integration modules ([tool.mutmut] in pyproject.toml); survivors are
#                  reviewed in tests/MUTANTS.md. One module with a narrowed test selection (in a copy,
#                  mutants-one/): make mutation MODULE=tplog/codec.py TESTS='tests/test_store.py -k "not postgres"'
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-fast test-lowest coverage lint bench clean mutation

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,pydantic-ai]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python tools/demo.py ./demo-store

# Coverage is part of the test command: branch coverage of tplog/ at least 95 %, as STYLE.md asks (issue 27).
COV_FAIL_UNDER ?= 95
# Three workers on two cores: many tests wait on servers and subprocesses (issue 39: 27 min serial, ~15 in 3).
TEST_JOBS ?= 3
test: lint
	$(BIN)/python -m pytest -n $(TEST_JOBS) --cov=tplog --cov-report=term-missing:skip-covered --cov-fail-under=$(COV_FAIL_UNDER)

coverage: test

# What a change usually breaks, in a few minutes; `make test` (CI) stays the whole suite.
FAST := not pg and not browser and not node and not fuse and not slow
JOBS ?= auto
test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -n $(JOBS) -m "$(FAST)"

lint: $(BIN)/.installed
	$(BIN)/ruff check tplog tests benchmarks tools
	$(BIN)/mypy --strict tplog

# A separate venv pinned to the floors of pyproject.toml (tools/constraints-lowest.txt).
LOW := .venv-lowest/bin
$(LOW)/.installed: pyproject.toml tools/constraints-lowest.txt
	$(PYTHON) -m venv .venv-lowest
	$(LOW)/python -m pip install -q --upgrade pip
	$(LOW)/python -m pip install -q -c tools/constraints-lowest.txt -e '.[test,pydantic-ai]'
	touch $@

test-lowest: $(LOW)/.installed
	PATH="$(CURDIR)/$(LOW):$$PATH" $(LOW)/python -m pytest -n $(TEST_JOBS)

$(BIN)/.bench-installed: $(BIN)/.installed
	$(BIN)/python -m pip install -q -e '.[bench]'
	touch $@

bench: $(BIN)/.bench-installed
	$(BIN)/python -m benchmarks.suite

$(BIN)/.mutation-installed: $(BIN)/.installed
	$(BIN)/python -m pip install -q -e '.[mutation]'
	touch $@

mutation: $(BIN)/.mutation-installed
ifdef MODULE
	$(BIN)/python tools/mutation_one.py $(MODULE) $(TESTS)
else
	nice -n 10 $(BIN)/mutmut run --max-children 2 $(MUTANTS)
	$(BIN)/mutmut export-cicd-stats
	$(BIN)/python tools/mutation_report.py
endif

clean:
	rm -rf $(VENV) .venv-lowest demo-store .pytest_cache .coverage .coverage.* mutants mutants-one
