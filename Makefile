# The project's verbs. Everything runs inside a virtual environment that `make`
# creates (or reuses) from pyproject.toml, so a fresh machine needs only Python and pip.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# instructor caps jiter below 0.15 while the openai of .venv needs jiter 0.16 or later, so it
# gets a venv of its own inside .venv, where pip picks an openai it accepts;
# tests/e2e/test_real_clients.py runs tests/e2e/instructor_client.py with its python.
INSTRUCTOR       := $(VENV)/clients/instructor
INSTRUCTOR_STAMP := $(INSTRUCTOR)/.installed-stamp
INSTRUCTOR_REQUIREMENT := instructor>=1.14,<2
# LiteLLM's proxy, for bench/e2e_overhead.py's LiteLLM leg (issue 14), only for `make bench`:
# the venv's litellm (>= 1.110, for tests/e2e) cannot have its proxy here (its proxy extra
# needs a litellm-proxy the package index does not hold), 1.108.7's can. It goes into a
# folder of its own, which the proxy's process alone puts first on its path
# (BENCH_LITELLM_PATH). When it does not install, the bench prints the figure unavailable.
LITELLM_PROXY       := $(VENV)/clients/litellm-proxy
LITELLM_PROXY_STAMP := $(LITELLM_PROXY)/.installed-stamp
LITELLM_PROXY_REQUIREMENT := litellm[proxy]==1.108.7

.DEFAULT_GOAL := help

.PHONY: help install run test unit fuzz typecheck generate check-generated docs lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(INSTRUCTOR_STAMP): Makefile | $(STAMP)
	test -x $(INSTRUCTOR)/bin/python || $(PYTHON) -m venv $(INSTRUCTOR)
	$(INSTRUCTOR)/bin/python -m pip install --quiet --upgrade pip
	$(INSTRUCTOR)/bin/python -m pip install --quiet '$(INSTRUCTOR_REQUIREMENT)'
	touch $(INSTRUCTOR_STAMP)

$(LITELLM_PROXY_STAMP): Makefile | $(STAMP)
	rm -rf $(LITELLM_PROXY)
	$(BIN)/python -m pip install --quiet --no-warn-conflicts --target $(LITELLM_PROXY) '$(LITELLM_PROXY_REQUIREMENT)'
	touch $(LITELLM_PROXY_STAMP)

## install: create .venv and install the project with its test dependencies (and instructor's venv)
install: $(STAMP) $(INSTRUCTOR_STAMP)

## run: the whole horde locally, on the embedded Postgres and Redis
run: $(STAMP)
	$(BIN)/horde-chat up

## test: regenerate-and-compare, lint, type-check, then the whole pytest suite
test: $(STAMP) $(INSTRUCTOR_STAMP) check-generated lint typecheck
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## unit: the unit tests only (no servers; seconds)
unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -m 'not integration' $(PYTEST_ARGS)

## fuzz: the schemathesis tests (marker fuzz) against the live native API and front
fuzz: $(STAMP)
	$(BIN)/python -m pytest -m fuzz tests/fuzz $(PYTEST_ARGS)

## typecheck: mypy over runtime/, codegen/ and generated/ (settings in pyproject.toml)
typecheck: $(STAMP)
	$(BIN)/mypy

## generate: spec/ -> generated/
generate: $(STAMP)
	$(BIN)/python -m codegen generate

## check-generated: regenerate into a temporary folder and fail on any difference
check-generated: $(STAMP)
	$(BIN)/python -m codegen check

## docs: the docs site (guides, reference, OpenAPI pages, search) in build/docs/; reads offline
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

## lint: ruff's rules, ruff's format check and the import contracts (pyproject [tool.importlinter])
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

## format: apply ruff's fixes and format
format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## bench: run every benchmark in bench/ and print its figures
# A bench is a bench/*.py with a __main__ block (helpers such as native_stack.py have none;
# bench/support/ holds more). Each prints `figure: NAME = VALUE UNIT` lines; a bench's stderr
# (the services' access logs) is shown only if it fails; every figure is repeated at the end.
bench: $(STAMP)
	@$(MAKE) --no-print-directory $(LITELLM_PROXY_STAMP) \
		|| echo "LiteLLM's proxy did not install: its figure is printed unavailable"
	@export BENCH_LITELLM_PATH=$${BENCH_LITELLM_PATH:-$(abspath $(LITELLM_PROXY))}; \
	figures=$$(mktemp); out=$$(mktemp); log=$$(mktemp); \
	for b in bench/*.py; do \
		grep -q '^if __name__ == "__main__":' $$b || continue; \
		echo "== $$b"; \
		if ! $(BIN)/python $$b >$$out 2>$$log; then \
			cat $$out; tail -40 $$log; rm -f $$figures $$out $$log; exit 1; fi; \
		cat $$out; cat $$out >> $$figures; \
	done; \
	echo "== figures"; grep '^figure: ' $$figures; rm -f $$figures $$out $$log

## clean: remove .venv and the tools' caches
clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

## help: this list
help:
	@grep -E '^## [a-z-]+:' $(MAKEFILE_LIST) | sed -e 's/^## //' | awk -F': ' '{ printf "  %-16s %s\n", $$1, $$2 }'
