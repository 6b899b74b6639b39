# Both entry points bootstrap their own virtualenv from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HASH   := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Two stamps in one virtualenv: the demo needs only the runtime dependencies (a new user's first
# command: ~15 s cold), the tests add their extras (pytest, hypothesis, playwright, duckdb, ruff, ...).
RUNTIME := $(VENV)/.runtime-$(HASH)
STAMP   := $(VENV)/.installed-$(HASH)

.PHONY: demo test lint fuzz bench fixtures clean

$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	# the cookbook's own trace writer, without its heavy ML dependency tree
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps tinker-cookbook==0.6.1
	touch $(STAMP)

demo: $(RUNTIME)
	$(BIN)/trace-doctor demo

# The linter runs first: a tree ruff rejects does not pass `make test` (nor CI, which calls it).
# Two pytest-xdist workers, a test file each at a time (module fixtures built once): while one waits
# on Chromium compiling a report's plotly.js, the other runs (6.9 -> 4.3 min on 2 shared cores).
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

# The fuzzer of tests/test_fuzz_runs.py with a large budget (make test runs 60 examples of it).
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP)
	TRACE_DOCTOR_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -x tests/test_fuzz_runs.py

lint: $(STAMP)
	$(BIN)/ruff format --check --quiet .
	$(BIN)/ruff check --quiet .

# benchmarks/run.py's defaults: 3000/12000/24000 steps x 64, 3 rounds (20-35 min on 2 cores; the naive
# parse of the 1.2 GB trace peaks at 9.4 GB; the generated runs take ~4.5 GB in benchmarks/data/).
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/many_runs.py
	$(BIN)/python benchmarks/redaction.py
	$(BIN)/python benchmarks/ingest_limits.py

fixtures: $(STAMP)
	$(BIN)/python fixtures/generate.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
