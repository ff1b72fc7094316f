# stepline developer entry points. `make run` and `make test` do all their own set-up.
#
# One cargo profile everywhere (release: run, test, clippy, bench) so RocksDB is compiled once, and
# a target directory outside the checkout so every clone and CI run on the machine shares it.

SHELL := /bin/bash

CARGO_TARGET_DIR ?= $(HOME)/.cache/stepline/target
export CARGO_TARGET_DIR

# Python venv with the real clients of the end-to-end tests (pydantic-ai, OTLP exporters).
VENV ?= $(HOME)/.cache/stepline/venv
VENV_PYTHON := $(VENV)/bin/python
SYSTEM_PYTHON ?= python3
REQUIREMENTS := tests/python/requirements.txt
VENV_STAMP := $(VENV)/.requirements.sha256
# A second venv with Pydantic AI 1.x (the main one pins 2.x), for the 1.x end-to-end tests.
VENV_PYDANTIC_AI_1 ?= $(VENV)-pydantic-ai-1
REQUIREMENTS_PYDANTIC_AI_1 := tests/python/requirements-pydantic-ai-1.txt
# A third venv with the test tools: Selenium (tests/ui.rs), openapi-spec-validator and schemathesis (tests/openapi.rs).
VENV_TOOLS ?= $(VENV)-tools
VENV_TOOLS_PYTHON := $(VENV_TOOLS)/bin/python
REQUIREMENTS_TOOLS := tests/python/requirements-tools.txt
VENV_TOOLS_STAMP := $(VENV_TOOLS)/.requirements.sha256

# More venvs, one per file: tests/python/venvs/NAME.txt → $(VENV)-NAME (STEPLINE_VENV_PREFIX-NAME in the
# tests). A NAME.nodeps.txt beside it is installed after it with --no-deps (for packages whose declared
# dependencies the package index cannot satisfy).
VENV_NAMES := $(patsubst tests/python/venvs/%.txt,%,$(filter-out %.nodeps.txt,$(wildcard tests/python/venvs/*.txt)))
# Node projects for the JavaScript end-to-end tests: tests/node/NAME/package.json (+ package-lock.json) →
# $(NODE_CACHE)/NAME/node_modules, installed with `npm ci` outside the checkout.
NODE_CACHE ?= $(HOME)/.cache/stepline/node
NODE_NAMES := $(patsubst tests/node/%/package.json,%,$(wildcard tests/node/*/package.json))

CONFIG ?= collector.yaml
BENCH_ARGS ?=
# Options of benches/peer_bench.py (PORT_OFFSET=N moves its ports; see examples/README.md, "peer bench").
PEER_ARGS ?=
SOAK_ARGS ?= --minutes 10

.PHONY: run test deps test-deps venv venv-tools venvs node-deps lint bench bench-peer bench-soak

## run: stepline on the default config (OTLP 127.0.0.1:4317/4318, API 127.0.0.1:4320, data in ./data)
run: deps
	cargo run --release -- --config $(CONFIG)

## test: the whole suite, end-to-end tests included (real binary + real Pydantic AI clients)
test: deps test-deps venv venv-tools venvs node-deps
	STEPLINE_PYTHON=$(VENV_PYTHON) STEPLINE_PYTHON_PYDANTIC_AI_1=$(VENV_PYDANTIC_AI_1)/bin/python STEPLINE_PYTHON_TOOLS=$(VENV_TOOLS_PYTHON) \
	  STEPLINE_VENV_PREFIX=$(VENV) STEPLINE_NODE_CACHE=$(NODE_CACHE) cargo test --release --no-fail-fast --lib --bins --tests

## deps: system packages the build needs (libclang for the RocksDB bindings); a no-op when present
deps:
	@missing=""; \
	if command -v dpkg >/dev/null 2>&1; then \
	  dpkg -s libclang-dev >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	  command -v c++ >/dev/null 2>&1 || missing="$$missing g++"; \
	else \
	  echo "deps: no dpkg here; make sure libclang and a C++ compiler are installed (RocksDB needs them)"; \
	fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" -eq 0 ]; then \
	    echo "deps: installing$$missing"; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
	  else \
	    echo "deps: missing system packages:$$missing"; \
	    echo "deps: install them with: sudo apt-get update && sudo apt-get install -y$$missing"; \
	    exit 1; \
	  fi; \
	fi

## test-deps: Chromium and chromedriver for the browser tests (tests/ui.rs); only `make test` needs them
test-deps:
	@browser=""; \
	if command -v dpkg >/dev/null 2>&1; then \
	  dpkg -s chromium >/dev/null 2>&1 || browser="$$browser chromium"; \
	  dpkg -s chromium-driver >/dev/null 2>&1 || browser="$$browser chromium-driver"; \
	else \
	  echo "test-deps: no dpkg here; install Chromium with chromedriver for the browser tests"; \
	fi; \
	if [ -n "$$browser" ]; then \
	  if [ "$$(id -u)" -eq 0 ]; then \
	    echo "test-deps: installing$$browser"; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$browser; \
	  else \
	    echo "test-deps: the browser tests (tests/ui.rs) will skip: install$$browser with: sudo apt-get install -y$$browser"; \
	  fi; \
	fi

## venv: (re)create $(VENV) when tests/python/requirements.txt changed (stamp holds its sha256)
venv:
	@want=$$(sha256sum $(REQUIREMENTS) | cut -d' ' -f1); \
	have=$$(cat $(VENV_STAMP) 2>/dev/null || true); \
	if [ -x "$(VENV_PYTHON)" ] && [ "$$want" = "$$have" ]; then exit 0; fi; \
	echo "venv: installing $(REQUIREMENTS) into $(VENV)"; \
	$(SYSTEM_PYTHON) -m venv $(VENV) \
	  && $(VENV_PYTHON) -m pip install --quiet --disable-pip-version-check -r $(REQUIREMENTS) \
	  && echo "$$want" > $(VENV_STAMP)
	@want=$$(sha256sum $(REQUIREMENTS_PYDANTIC_AI_1) | cut -d' ' -f1); \
	have=$$(cat $(VENV_PYDANTIC_AI_1)/.requirements.sha256 2>/dev/null || true); \
	if [ -x "$(VENV_PYDANTIC_AI_1)/bin/python" ] && [ "$$want" = "$$have" ]; then exit 0; fi; \
	echo "venv: installing $(REQUIREMENTS_PYDANTIC_AI_1) into $(VENV_PYDANTIC_AI_1)"; \
	$(SYSTEM_PYTHON) -m venv $(VENV_PYDANTIC_AI_1) \
	  && $(VENV_PYDANTIC_AI_1)/bin/python -m pip install --quiet --disable-pip-version-check -r $(REQUIREMENTS_PYDANTIC_AI_1) \
	  && echo "$$want" > $(VENV_PYDANTIC_AI_1)/.requirements.sha256

## venv-tools: (re)create $(VENV_TOOLS) when tests/python/requirements-tools.txt changed (stamp holds its sha256)
venv-tools:
	@want=$$(sha256sum $(REQUIREMENTS_TOOLS) | cut -d' ' -f1); \
	have=$$(cat $(VENV_TOOLS_STAMP) 2>/dev/null || true); \
	if [ -x "$(VENV_TOOLS_PYTHON)" ] && [ "$$want" = "$$have" ]; then exit 0; fi; \
	echo "venv-tools: installing $(REQUIREMENTS_TOOLS) into $(VENV_TOOLS)"; \
	$(SYSTEM_PYTHON) -m venv $(VENV_TOOLS) \
	  && $(VENV_TOOLS_PYTHON) -m pip install --quiet --disable-pip-version-check -r $(REQUIREMENTS_TOOLS) \
	  && echo "$$want" > $(VENV_TOOLS_STAMP)

## venvs: (re)create $(VENV)-NAME for each tests/python/venvs/NAME.txt that changed (stamp: sha256 of its files)
venvs:
	@for name in $(VENV_NAMES); do \
	  req=tests/python/venvs/$$name.txt; nodeps=tests/python/venvs/$$name.nodeps.txt; dir=$(VENV)-$$name; \
	  want=$$(cat $$req $$( [ -f $$nodeps ] && echo $$nodeps ) | sha256sum | cut -d' ' -f1); \
	  have=$$(cat $$dir/.requirements.sha256 2>/dev/null || true); \
	  if [ -x "$$dir/bin/python" ] && [ "$$want" = "$$have" ]; then continue; fi; \
	  echo "venvs: installing $$req into $$dir"; \
	  rm -rf $$dir && $(SYSTEM_PYTHON) -m venv $$dir \
	    && $$dir/bin/python -m pip install --quiet --disable-pip-version-check -r $$req \
	    && { [ ! -f $$nodeps ] || $$dir/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r $$nodeps; } \
	    && echo "$$want" > $$dir/.requirements.sha256 || exit 1; \
	done

## node-deps: `npm ci` for each tests/node/NAME into $(NODE_CACHE)/NAME when its package files changed
node-deps:
	@for name in $(NODE_NAMES); do \
	  src=tests/node/$$name; dir=$(NODE_CACHE)/$$name; \
	  want=$$(cat $$src/package.json $$src/package-lock.json 2>/dev/null | sha256sum | cut -d' ' -f1); \
	  have=$$(cat $$dir/.package.sha256 2>/dev/null || true); \
	  if [ -d "$$dir/node_modules" ] && [ "$$want" = "$$have" ]; then continue; fi; \
	  command -v npm >/dev/null 2>&1 || { echo "node-deps: npm is missing (install nodejs and npm)"; exit 1; }; \
	  echo "node-deps: installing $$src into $$dir"; \
	  rm -rf $$dir && mkdir -p $$dir && cp $$src/package.json $$dir/ \
	    && { [ ! -f $$src/package-lock.json ] || cp $$src/package-lock.json $$dir/; } \
	    && ( cd $$dir && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; \
	         else npm install --no-audit --no-fund --loglevel=error; fi ) \
	    && echo "$$want" > $$dir/.package.sha256 || exit 1; \
	done

## lint: formatting and clippy (warnings are errors), also with the benchmarks' allocation count
lint: deps
	cargo fmt --check
	cargo clippy --release --all-targets -- -D warnings
	cargo clippy --release --all-targets --features count-allocations -- -D warnings

## bench: the load generator against the release binary (options: make bench BENCH_ARGS="--runs 500")
bench: deps
	cargo build --release
	cargo run --release --example loadgen -- $(BENCH_ARGS)

## bench-peer: stepline against Rotel (PyPI), plain/agent x 20-span runs/500-span requests, then the
## ack latency at half the maximum throughput (options: make bench-peer PEER_ARGS="--seconds 30")
bench-peer: deps
	cargo build --release --bin stepline --example loadgen
	$(SYSTEM_PYTHON) benches/peer_bench.py matrix $(PEER_ARGS)
	$(SYSTEM_PYTHON) benches/peer_bench.py latency $(PEER_ARGS)

## bench-soak: one agent load against both servers for 10 minutes, RSS over time, then 60 s idle
## (options: make bench-soak SOAK_ARGS="--minutes 30 --rate 2000")
bench-soak: deps
	cargo build --release --bin stepline --example loadgen
	$(SYSTEM_PYTHON) benches/peer_bench.py soak $(SOAK_ARGS)
