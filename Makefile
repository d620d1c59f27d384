# The two commands of a fresh machine:   make demo   and   make test
VENV ?= .venv
BIN := $(VENV)/bin
# Machines without internet fetch data from a mirror of the upstream layout; ../shared/data is
# one when it exists. Set DATA_MIRROR= (empty) to use the official release URLs.
DATA_MIRROR ?= $(if $(wildcard ../shared/data/README.md),file://$(abspath ../shared/data),)
# The tests use the same root and mirror as `make data` (see conftest.py).
export DATA_MIRROR
export DERL_BENCH_DATA ?= $(abspath .cache/data)

.PHONY: setup data demo test test-fast test-numerics benchmarks lint

# The tests that compare float32 results whose sums run in different orders (marker `numerics`,
# tolerances from tests/numerics.py), run again on 1 and on 2 torch threads with deterministic
# algorithms, so a result that depends on the thread count shows on any machine (under a
# minute on 2 cores). A subshell's command: it exits with the first failing run's status.
NUMERICS_TESTS := tests/grpo tests/policies
NUMERICS = for threads in 1 2; do \
	  echo "== numerics tests: $$threads torch thread(s), deterministic algorithms"; \
	  DERL_BENCH_TEST_THREADS=$$threads DERL_BENCH_TEST_DETERMINISTIC=1 \
	    $(BIN)/python -m pytest -q -m numerics $(NUMERICS_TESTS) || exit $$?; \
	done

setup:
	./scripts/setup

data: setup
	$(BIN)/derl-bench data download all $(if $(DATA_MIRROR),--mirror $(DATA_MIRROR))

demo: data
	$(BIN)/derl-bench demo

# Every part runs even when an earlier one fails; the exit status is the first non-zero one
# (pytest's 5, no tests collected, counts as a failure).
test:
	@pytest=0; numerics=0; benchmarks=0; \
	$(BIN)/python -m pytest || pytest=$$?; \
	( $(NUMERICS) ) || numerics=$$?; \
	$(BIN)/python benchmarks/compare.py || benchmarks=$$?; \
	echo "make test: pytest exit $$pytest, numerics tests exit $$numerics," \
	     "benchmarks exit $$benchmarks"; \
	for status in $$pytest $$numerics $$benchmarks; do \
	  [ $$status -eq 0 ] || exit $$status; \
	done

test-fast:
	$(BIN)/python -m pytest -m "not slow"

test-numerics:
	@$(NUMERICS)

benchmarks:
	$(BIN)/python benchmarks/compare.py

lint:
	$(BIN)/ruff check derl_bench environments tests benchmarks scripts leaderboards conftest.py
	$(BIN)/mypy
