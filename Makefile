# The project's verbs. Everything runs inside a virtual environment that `make`
# creates (or reuses) from pyproject.toml, so a fresh machine needs only Python and pip.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install run test unit generate check-generated lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## run: the whole horde locally, on the embedded Postgres and Redis
run: $(STAMP)
	$(BIN)/horde-chat up

## test: regenerate-and-compare, lint, then the whole pytest suite
test: $(STAMP) check-generated lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## generate: spec/ -> generated/
generate: $(STAMP)
	$(BIN)/python -m codegen generate

## check-generated: regenerate into a temporary folder and fail on any difference
check-generated: $(STAMP)
	$(BIN)/python -m codegen check

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
