# The project's commands. On a fresh machine `make demo` needs only Python 3.11+, and
# `make test` also Node (the CDK CLI), Go (MinIO) and a CPython 3.13 (the layer's
# bytecode): everything else is installed into .venv, node_modules and .work.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CDK_CLI := cdk/node_modules/.bin/cdk

.PHONY: setup demo tools minio test test-fast test-spark lint typecheck typecheck-cdk bench fuzz layer synth dist release clean

UV_VERSION := 0.13.9
PIP_VERSION := 26.3
UV := $(VENV)/bin/uv pip install --quiet --python $(PY) --constraint constraints.txt

# uv installs the pinned set in about a minute; pip's resolver took 13 to 20 minutes.
# pip stays in the venv, at a pinned version: the layer build runs it.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(UV) pip==$(PIP_VERSION) -e '.[dev,deploy]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/s3slice demo

# Tools the infrastructure tests need beyond Python: the CDK CLI (npm) and an aarch64
# strip for trimming the arm64 layer (Debian's binutils-aarch64-linux-gnu).
$(CDK_CLI): cdk/package.json
	npm ci --prefix cdk --no-audit --no-fund --loglevel=error
	touch $(CDK_CLI)

tools: $(CDK_CLI)
	@command -v aarch64-linux-gnu-strip >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq binutils-aarch64-linux-gnu >/dev/null); \
	  else sudo apt-get install -y binutils-aarch64-linux-gnu; fi; }

# MinIO, for the S3 Select comparisons (tests/integration/test_minio_select.py): a pinned
# `go install` (tests/benchmark/substrate.py) of 7 to 11 minutes on a cold 2-core machine,
# kept in tests/benchmark/.work/bin and reused while the pin is unchanged (then instant).
MINIO_LOG := tests/benchmark/.work/minio-build.log
minio: $(STAMP)
	@mkdir -p $(dir $(MINIO_LOG))
	@$(PY) -c 'import sys; from tests.benchmark.substrate import MINIO_MODULE, MINIO_VERSION, go_install; go_install(MINIO_MODULE, MINIO_VERSION, "minio", open(sys.argv[1], "a"))' $(MINIO_LOG) \
	  || { tail -n 30 $(MINIO_LOG); echo "make minio: the MinIO build failed (log: $(MINIO_LOG))"; exit 1; }

# The paths CI lints. tests/benchmark/ is run by hand (`make bench`), not by CI.
GUARANTEED := functions cdk layers tests/conftest.py tests/support.py tests/unit \
	tests/functional tests/integration tests/infrastructure tests/fuzz

lint: $(STAMP)
	$(VENV)/bin/ruff check $(GUARANTEED)

# mypy strict on the service, the CDK app and the layer build (pyproject's `files`).
typecheck: $(STAMP)
	$(VENV)/bin/mypy

typecheck-cdk: $(STAMP)
	MYPYPATH=layers $(VENV)/bin/mypy cdk

# What CI runs: lint, types, then unit, functional and integration tests (a real S3
# server on loopback) and the infrastructure tests (CDK synthesis, cdk-nag, cfn-lint,
# `cdk synth` through the CLI, and the layer built for both architectures), and the S3
# Select comparisons against MinIO (built first by `make minio`).
# Every test runs; the benchmark (tests/benchmark/) is not a test suite and is never
# collected.
# And Iceberg tables written by real Spark (tests/spark/): a slice of them, SPARK_CI_TABLES
# (Spark's venv and the tables are built once per machine, about four minutes).
SPARK_CI_TABLES ?= v1_plain,mixed_multi,gzip_snappy,schema_evolution,nested,odd_names,snapshots,mor_merge,partition_evolution_v1
test: $(STAMP) tools minio lint typecheck
	S3SLICE_SPARK_TABLES=$(SPARK_CI_TABLES) $(VENV)/bin/pytest tests/unit tests/functional \
	  tests/integration tests/infrastructure tests/spark -p no:cacheprovider

# The quick loop: no network, no layer builds, no CDK CLI, nothing marked slow.
test-fast: $(STAMP)
	$(VENV)/bin/pytest tests/unit tests/functional -m "not slow" -p no:cacheprovider

bench: $(STAMP)
	$(UV) -e '.[bench]'
	$(PY) -m tests.benchmark.run $(BENCH_ARGS)

# The differential fuzzer (tests/fuzz) for FUZZ_SECONDS with a fresh seed (FUZZ_SEED=n
# repeats a run): random tables by pyarrow, polars, DuckDB, fastparquet and Spark, random
# filters and aggregates, the service's answers against polars in memory and DuckDB; every
# difference is printed with the command that replays it (FUZZ_REPLAY=case-seed). Fails
# when the service answered wrong or crashed untyped. CI runs a fixed-seed slice
# (tests/functional/test_fuzz_differential.py, tests/integration/test_fuzz_s3.py).
FUZZ_SECONDS ?= 480
fuzz: $(STAMP)
	$(UV) -e '.[fuzz]'
	$(PY) -m tests.fuzz --spark --seconds $(FUZZ_SECONDS) \
	  $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)) $(if $(FUZZ_REPLAY),--replay $(FUZZ_REPLAY)) $(FUZZ_ARGS)

# Every Iceberg table written by real Spark (tests/spark/), read through the handler and
# compared with pyiceberg and polars.scan_iceberg (`make test` runs a slice): the first run
# builds Spark's own venv (pyspark 4.1) and writes ~40 tables, some 10 minutes, then ~35 s
# a table.
test-spark: $(STAMP)
	S3SLICE_SPARK_TABLES= $(VENV)/bin/pytest tests/spark -p no:cacheprovider $(SPARK_ARGS)

layer: $(STAMP) tools
	$(PY) layers/build.py --arch arm64

synth: $(STAMP) tools layer
	$(CDK_CLI) synth --app "$(PY) cdk/app.py"

# The distributions, in seconds and without building a layer: the engine s3slice and the
# construct library s3slice-cdk (cdk/, which carries the function's code), each a wheel
# and an sdist, in dist/.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' functions/s3slice/__init__.py)
LAYER_PYTHON ?= 3.13
dist: $(STAMP)
	rm -rf dist && mkdir -p dist
	$(VENV)/bin/uv build --quiet --out-dir dist
	$(VENV)/bin/uv build --quiet --out-dir dist cdk

# A release's artifacts (RELEASING.md): `dist`, then both layer zips named by version,
# Python and architecture (minutes: the layer build), and the SHA-256 sums of everything.
release: dist tools
	for arch in arm64 x86_64; do \
	  $(PY) layers/build.py --arch $$arch --python $(LAYER_PYTHON) --zip || exit 1; \
	  cp layers/build/$$arch/layer.zip dist/s3slice-layer-$(VERSION)-python$(LAYER_PYTHON)-$$arch.zip; \
	done
	cd dist && sha256sum s3slice-$(VERSION)-py3-none-any.whl s3slice-$(VERSION).tar.gz \
	  s3slice_cdk-$(VERSION)-py3-none-any.whl s3slice_cdk-$(VERSION).tar.gz \
	  s3slice-layer-$(VERSION)-python$(LAYER_PYTHON)-*.zip > SHA256SUMS && cat SHA256SUMS

clean:
	rm -rf $(VENV) cdk/node_modules cdk/build cdk.out layers/build
