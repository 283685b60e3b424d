# `make run` and `make test` do all set-up themselves (see README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# The state tests run on SQLite and on this PostgreSQL (see .ci/run for starting it).
export RESPONSEKIT_TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/test

.PHONY: run test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip install --quiet -e '.[test,embeddings,llama]'
	touch $@ $(VENV)/.installed-run

## Start the server on the embedded defaults (http://127.0.0.1:8400/v1); extra flags via ARGS="…".
run: $(VENV)/.installed-run
	$(BIN)/responsekit serve $(ARGS)

# The real JavaScript clients the tests drive (Codex CLI, the Vercel AI SDK).
tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	npm ci --prefix tests/js --no-audit --no-fund </dev/null
	touch $@

## Install everything the tests need and run them all.
test: $(VENV)/.installed-test tests/js/node_modules/.installed
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache tests/js/node_modules
