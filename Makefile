# calibo: `make run` and `make test` work on a fresh clone; both install into .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= server,optuna,test,ray,katib


.PHONY: run demo test test-fast docs lint typecheck bench bench-search bench-service bench-load bench-crowd-live bench-cluster bench-calibration bench-surrogates bench-crowd bench-fit-time bench-device-paths bench-multifidelity clean venv

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

# torch first, pinned to the CPU wheel on disk, so pip never resolves a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install "torch==2.13.0"
	$(BIN)/python -m pip install -e ".[$(EXTRAS)]"
	@touch $(STAMP)

venv: $(STAMP)

# The suite runs on every core (pytest-xdist): each worker process has its own databases, ports and
# servers (tests/conftest.py), and most of the slow tests wait on live servers, fits and restarts.
# TEST_WORKERS=0 runs it in one process. pytest exits 5 when it collects no test: that fails too.
TEST_WORKERS ?= auto
NO_TESTS = { rc=$$?; [ $$rc -ne 5 ] || echo "make $@: pytest collected no test (exit 5)" >&2; exit $$rc; }
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) || $(NO_TESTS)

# The edit-test loop: the unit tests only (no live server, no database server, nothing slow; markers in
# tests/conftest.py), under a minute on 2 cores. `make test` (and .ci/run) still runs everything. One
# BLAS / torch thread per worker: two workers each spinning up every core's threads made the GP tests
# several times slower on a busy 2-core machine.
FAST_WORKERS ?= 2
test-fast: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(FAST_WORKERS) -q -m "unit and not slow" || $(NO_TESTS)

# The documentation site (mkdocs-material + mkdocstrings): docs/ and mkdocs.yml, built into site/;
# --strict fails on any broken link or missing reference. The REST reference is generated from the app.
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -e ".[$(EXTRAS),docs]"
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict -d site

# ruff over the whole tree (pyproject's [tool.ruff]: the style rules and 120 columns); run by .ci/run.
lint: $(STAMP)
	$(BIN)/ruff check .

# mypy over every installed package, and --strict on calibo.engine and calibo.server.studies (.ci/typecheck).
typecheck: $(STAMP)
	$(BIN)/python .ci/typecheck

# The service on its embedded default: SQLite at ./calibo.db, port 8000, local fit pool.
CALIBO_DATABASE_URL ?= sqlite:///./calibo.db
PORT ?= 8000
run: $(STAMP)
	CALIBO_DATABASE_URL=$(CALIBO_DATABASE_URL) $(BIN)/calibo serve --host 127.0.0.1 --port $(PORT)

demo: $(STAMP)
	$(BIN)/calibo demo

BENCH_STAMP := $(VENV)/.installed-bench

# peers (Optuna, ConfOpt, SMAC3) live in the `bench` extra, never in the runtime
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -e ".[$(EXTRAS),bench]"
	@touch $(BENCH_STAMP)

bench: bench-search bench-calibration

# Long: 14 methods x 6 tasks x 10 seeds x 100 trials. WORKERS=n runs n at a time.
WORKERS ?= 2
bench-search: $(BENCH_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.search --workers $(WORKERS)

# calibo serve (SQLite, and PostgreSQL at 127.0.0.1:5432) against Optuna RDB ask/tell; ~25 min.
bench-service: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.service

# A crowd (64 and 16 clients x 2000 trials) on calibo serve, kill -9 and a PostgreSQL outage mid-run:
# throughput, latencies, retries, errors by status, lost/duplicated tells, recovery time; ~5 min.
bench-load: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.load

# A fresh calibo serve under 32 clients (lognormal ~1 s trainings): asks served without a prediction,
# fit lag, quality against Optuna's GPSampler driven the same way; writes the key "live" of crowd.json.
bench-crowd-live: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.crowd_live

# Cluster mode on PostgreSQL at 127.0.0.1:5432: the local fit pool against the fit queue with 1-2 API
# processes x 1-2 `calibo worker`s, 32 clients: throughput, fit lag, sequential crowd latency; ~5 min.
bench-cluster: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.cluster --freeze

bench-calibration: $(BENCH_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.calibration --workers $(WORKERS)

# Every surrogate x acquisition (diagonal grid) on the search suite's tasks; long: see `python -m benchmarks.surrogates --help`.
bench-surrogates: $(BENCH_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.surrogates --workers $(WORKERS)

# calibo vs Optuna GP / TPE / random with K = 1, 8, 32 trials in flight (virtual clock, out-of-order
# results), 13 tasks x 5 seeds x 100 trials, plus calibration gap vs K; long (~2-4 h on 2 cores).
# VARIANTS="calibo:n_warmup=10,calibo:acquisition=ts" adds EngineConfig variants.
VARIANTS ?=
bench-crowd: $(BENCH_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.crowd_search --workers $(WORKERS) $(if $(VARIANTS),--variants "$(VARIANTS)")

# Fit time against observations (100 .. 30,000) per surrogate and backend; DEVICE=cuda on a GPU machine.
DEVICE ?= auto
bench-fit-time: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.fit_time --device $(DEVICE)

# GPU paths: the GP's tuning on CPU vs GPU, the MLPs' eager vs CUDA-graph training (CPU only without a GPU).
bench-device-paths: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.device_paths

# Pruners on real learning curves (MLP on digits / breast_cancer, cached tables): calibo's median, sh, hb,
# sh+, hb+ against Optuna's Median / SuccessiveHalving / Hyperband and no pruning, 10 seeds; ~3 minutes.
bench-multifidelity: $(BENCH_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.multifidelity --workers $(WORKERS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
