# `make run` and `make test` do all set-up themselves (see README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# The state tests run on SQLite and on this PostgreSQL, or on a private one they start when it does
# not answer and PostgreSQL is installed (tests/postgres.py).
export RESPONSEKIT_TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/test

.PHONY: run test bench bench-peers clean

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

## Install everything the tests need and run them all, after checking that every module src/
## imports is a declared dependency (deptry; configured in pyproject.toml).
test: $(VENV)/.installed-test tests/js/node_modules/.installed
	$(BIN)/deptry src
	$(BIN)/python -m pytest -q

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip install --quiet -e '.[bench,embeddings,llama]'
	touch $@ $(VENV)/.installed-run

## Run the benchmarks (bench/*.py) and print their tables; results are recorded in bench/RESULTS.md.
## The gateway benchmark includes LiteLLM and llama-stack when `make bench-peers` installed them.
## One or some: make bench BENCHES=gateway
BENCHES ?= gateway state parsers vector_search engine
bench: $(VENV)/.installed-bench
	cd bench && for b in $(BENCHES); do ../$(BIN)/python $$b.py || exit 1; done

## Install the peers the gateway benchmark compares with, each in its own venv under bench/.peers/.
PEER_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python) python3.12)
bench-peers:
	python3 -m venv bench/.peers/litellm
	bench/.peers/litellm/bin/pip install --quiet 'litellm[proxy]!=1.107.0'
	$(PEER_PYTHON) -m venv bench/.peers/llama-stack
	bench/.peers/llama-stack/bin/pip install --quiet llama-stack 'mcp<2' chardet sqlite-vec aiosqlite \
		'sqlalchemy[asyncio]' numpy pypdf tiktoken

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache tests/js/node_modules
