# journald: two commands for a newcomer.
#   make run    set up the runtime and start the daemon on its embedded default (file backend)
#   make test   set up everything and run every check and test (what CI runs)
# For contributors: make test-fast  unit + storage tests, dev Hypothesis profile, no slow ones,
#                                    no nats-server (JetStream cases are left to make test)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PIP := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt
HASH = $(shell cat $(1) | sha256sum | cut -c1-12)
PYPROJECTS := pyproject.toml clients/python/pyproject.toml proto/python/pyproject.toml
RUN_STAMP := $(VENV)/.run-$(call HASH,constraints.txt $(PYPROJECTS))
DEV_STAMP := $(VENV)/.dev-$(call HASH,constraints.txt requirements-dev.txt $(PYPROJECTS))
PYTEST_ARGS ?= -n 2

.PHONY: setup setup-run run test lint gen gen-check check-proto clients conformance tools pytest test-fast bench bench-quick clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check pip==25.3

# journald_proto (the generated stubs) first: the client and the daemon both require it
$(RUN_STAMP): | $(PY)
	$(PIP) -e proto/python -e clients/python -e .
	@touch $@

$(DEV_STAMP): $(RUN_STAMP)
	$(PIP) -r requirements-dev.txt
	@touch $@

setup-run: $(RUN_STAMP)
setup: $(DEV_STAMP)

run: setup-run
	$(BIN)/journald serve

gen: setup
	$(PY) scripts/gen_proto.py
	@if [ -x scripts/gen_clients.sh ]; then scripts/gen_clients.sh; fi

gen-check: setup
	$(PY) scripts/gen_proto.py --check

check-proto: setup
	$(BIN)/buf lint
	$(BIN)/buf format --diff --exit-code
	@if [ -x scripts/check_proto_breaking.sh ]; then PATH=$(abspath $(BIN)):$$PATH scripts/check_proto_breaking.sh; fi

lint: setup gen-check check-proto
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clients: setup
	@if [ -x scripts/setup_clients.sh ]; then PATH=$(abspath $(BIN)):$$PATH scripts/setup_clients.sh && PATH=$(abspath $(BIN)):$$PATH scripts/test_clients.sh; fi

# The third-language check: a C++ writer built from the proto alone (conformance/cpp); its
# test against a real daemon is tests/integration/client/test_conformance_cpp.py, run by pytest.
conformance: setup
	scripts/setup_conformance.sh

# natscli, pinned, in .tools/bin: the tests run journald's printed `nats stream` fixes with it
tools:
	scripts/setup_natscli.sh

# the ci Hypothesis profile: full example counts and CI-sized state machines (tests/profiles.py)
pytest: setup
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -q $(PYTEST_ARGS)

test: lint clients conformance tools pytest

# the edit loop: unit + storage tests with the small dev profile; slow tests and the ones that
# need a nats-server (the `jetstream` mark) are left to make test. JOURNALD_TEST_NO_NATS makes
# a test that starts a nats-server anyway fail, naming the mark it lacks (tests/nats_server.py).
test-fast: setup
	JOURNALD_TEST_NO_NATS=1 HYPOTHESIS_PROFILE=dev $(BIN)/pytest -q $(PYTEST_ARGS) \
		-m "not slow and not jetstream" tests/unit tests/storage

bench: setup
	$(PIP) -r bench/requirements.txt
	$(PY) bench/run_all.py

bench-quick: setup
	$(PY) bench/run_all.py --quick --out /tmp/journald-bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .tools conformance/cpp/build
