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
# LiteLLM's proxy, for bench/e2e_overhead.py's LiteLLM leg, only for `make bench`:
# the venv's litellm (>= 1.110, for tests/e2e) cannot have its proxy here (its proxy extra
# needs a litellm-proxy the package index does not hold), 1.108.7's can. It goes into a
# folder of its own, which the proxy's process alone puts first on its path
# (BENCH_LITELLM_PATH). When it does not install, the bench prints the figure unavailable.
LITELLM_PROXY       := $(VENV)/clients/litellm-proxy
LITELLM_PROXY_STAMP := $(LITELLM_PROXY)/.installed-stamp
LITELLM_PROXY_REQUIREMENT := litellm[proxy]==1.108.7

# The horde's own clients, for tests/integration/test_horde_clients.py, each in a folder of
# its own: horde-sdk needs Python >= 3.12 (python3.12; pyenv's shim picks its newest 3.12),
# horde-client pins a pydantic and requests of its own, and the npm client is a node package.
PYTHON312           ?= python3.12
HORDE_SDK           := $(VENV)/clients/horde-sdk
HORDE_SDK_STAMP     := $(HORDE_SDK)/.installed-stamp
HORDE_SDK_REQUIREMENT := horde-sdk==0.33.3
HORDE_CLIENT        := $(VENV)/clients/horde-client
HORDE_CLIENT_STAMP  := $(HORDE_CLIENT)/.installed-stamp
HORDE_CLIENT_REQUIREMENT := horde-client==1.0.3
AI_HORDE_NPM        := $(VENV)/clients/ai-horde-npm
AI_HORDE_NPM_STAMP  := $(AI_HORDE_NPM)/.installed-stamp
AI_HORDE_NPM_REQUIREMENT := @zeldafan0225/ai_horde@5.2.0
HORDE_CLIENT_STAMPS := $(HORDE_SDK_STAMP) $(HORDE_CLIENT_STAMP) $(AI_HORDE_NPM_STAMP)

.DEFAULT_GOAL := help

.PHONY: help install run test unit fuzz typecheck generate check-generated docs lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# A client's venv of its own: $(call client_venv,FOLDER,PYTHON,REQUIREMENT).
define client_venv
	test -x $(1)/bin/python || $(2) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	$(1)/bin/python -m pip install --quiet '$(3)'
	touch $(1)/.installed-stamp
endef

$(INSTRUCTOR_STAMP): Makefile | $(STAMP)
	$(call client_venv,$(INSTRUCTOR),$(PYTHON),$(INSTRUCTOR_REQUIREMENT))

$(HORDE_SDK_STAMP): Makefile | $(STAMP)
	$(call client_venv,$(HORDE_SDK),PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | grep -m1 '^3\.12' || true) $(PYTHON312),$(HORDE_SDK_REQUIREMENT))

$(HORDE_CLIENT_STAMP): Makefile | $(STAMP)
	$(call client_venv,$(HORDE_CLIENT),$(PYTHON),$(HORDE_CLIENT_REQUIREMENT))

$(AI_HORDE_NPM_STAMP): Makefile | $(STAMP)
	mkdir -p $(AI_HORDE_NPM)
	npm install --prefix $(AI_HORDE_NPM) --no-audit --no-fund --silent '$(AI_HORDE_NPM_REQUIREMENT)'
	touch $(AI_HORDE_NPM_STAMP)

$(LITELLM_PROXY_STAMP): Makefile | $(STAMP)
	rm -rf $(LITELLM_PROXY)
	$(BIN)/python -m pip install --quiet --no-warn-conflicts --target $(LITELLM_PROXY) '$(LITELLM_PROXY_REQUIREMENT)'
	touch $(LITELLM_PROXY_STAMP)

## install: create .venv and install the project with its test dependencies (and the clients' own: instructor, horde-sdk, horde-client, the npm ai_horde)
install: $(STAMP) $(INSTRUCTOR_STAMP) $(HORDE_CLIENT_STAMPS)

## run: the whole horde locally, on the embedded Postgres and Redis
run: $(STAMP)
	$(BIN)/horde-chat up

## test: regenerate-and-compare, lint, type-check, then the whole pytest suite
test: $(STAMP) $(INSTRUCTOR_STAMP) $(HORDE_CLIENT_STAMPS) check-generated lint typecheck
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
