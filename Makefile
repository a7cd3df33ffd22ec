# journald: two commands for a newcomer.
#   make run    set up and start the daemon on its embedded default (file backend)
#   make test   set up and run every check and test (what CI runs)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements-dev.txt constraints.txt pyproject.toml clients/python/pyproject.toml | sha256sum | cut -c1-16)

.PHONY: setup run test lint gen gen-check check-proto pytest bench clean

setup: $(STAMP)

$(STAMP):
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip==25.3
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -r requirements-dev.txt -e clients/python -e .
	@rm -f $(VENV)/.installed-* && touch $@

run: setup
	$(BIN)/journald serve

gen: setup
	$(PY) scripts/gen_proto.py

gen-check: setup
	$(PY) scripts/gen_proto.py --check

check-proto: setup
	$(BIN)/buf lint
	$(BIN)/buf format --diff --exit-code

lint: setup gen-check check-proto
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

pytest: setup
	$(BIN)/pytest -q

test: lint pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
