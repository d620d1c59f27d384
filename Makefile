# The two commands of a fresh machine:   make demo   and   make test
VENV ?= .venv
BIN := $(VENV)/bin
# Machines without internet fetch data from a mirror of the upstream layout; ../shared/data is
# one when it exists. Set DATA_MIRROR= (empty) to use the official release URLs.
DATA_MIRROR ?= $(if $(wildcard ../shared/data/README.md),file://$(abspath ../shared/data),)
# The tests use the same root and mirror as `make data` (see conftest.py).
export DATA_MIRROR
export DERL_BENCH_DATA ?= $(abspath .cache/data)

.PHONY: setup data demo test test-fast benchmarks lint

setup:
	./scripts/setup

data: setup
	$(BIN)/derl-bench data download all $(if $(DATA_MIRROR),--mirror $(DATA_MIRROR))

demo: data
	$(BIN)/derl-bench demo

test:
	$(BIN)/python -m pytest
	$(BIN)/python benchmarks/compare.py

test-fast:
	$(BIN)/python -m pytest -m "not slow"

benchmarks:
	$(BIN)/python benchmarks/compare.py

lint:
	$(BIN)/ruff check derl_bench tests benchmarks scripts conftest.py
	$(BIN)/mypy
