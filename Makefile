# k3stack — the two commands: `make demo` and `make test`. Both idempotent.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test setup system venv lint format bench clean help docs stress soak openapi e2e

help:
	@echo "make demo   - install what is missing, start k3stack (embedded mode), run the main job, stop"
	@echo "make test   - install what is missing, run lint, the whole test suite with make e2e beside it (E2E=0: no e2e)"
	@echo "make setup  - only install (system packages + virtualenv)"
	@echo "make bench  - run the benchmark scripts under bench/"
	@echo "make docs   - regenerate the configuration page (docs/configuration.md)"
	@echo "make stress - the whole suite with every core kept busy by a CPU burner (flakiness check)"
	@echo "make soak   - the whole platform under a mix of work with faults; SOAK_ARGS=\"--minutes 20\" (report: soak-report.html)"
	@echo "make openapi - regenerate the services' committed OpenAPI snapshots"
	@echo "make e2e    - the whole platform under docker compose on this host's Docker Engine, tested"

setup: system venv

system:
	@bash scripts/setup_system.sh

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP) install -q --upgrade pip==26.3 setuptools==84.2.1 wheel==0.48.0
	@# torch==2.13.0 (CPU) comes from the wheel on this machine's disk; see README.
	@$(PIP) install -q -e '.[all,test]'
	@touch $(STAMP)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The suite and, beside it, make e2e (scripts/test.sh says why beside); E2E=0 leaves e2e out.
# Each part's time, the whole and e2e's share are printed.
test: setup lint
	@bash scripts/test.sh $(PYTEST_ARGS)

# Build every image, docker compose up, contract tests through the published ports, down -v.
e2e: setup
	@bash scripts/e2e.sh

demo: setup
	$(VENV)/bin/k3stack demo

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# The whole platform under load with faults (scripts/soak.py; SOAK_ARGS="--minutes 20 --concurrency 4").
soak: setup
	$(PY) scripts/soak.py $(SOAK_ARGS)

stress:
	@bash scripts/stress_test.sh $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

docs: venv
	$(PY) -m shared.settings --write docs/configuration.md

openapi: venv
	$(PY) scripts/openapi.py
