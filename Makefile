# The two commands a new user needs: `make test` and (later) `make demo`.
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: install test lint bench-coordinator

install:
	scripts/bootstrap.sh

# The whole suite. pytest exits 5 when it collects nothing; make treats any
# non-zero exit as failure, so "no tests" never passes.
test: install
	scripts/install_minio.sh
	scripts/install_spark_s3.sh
	scripts/install_browser.sh
	CKPT_TEST_PG_URL=$$(scripts/start_postgres.sh) $(PY) -m pytest -q -p no:cacheprovider

lint: install
	.venv/bin/ruff check .

# Checkpointing vs full recompute vs Structured Streaming; writes bench/results/latest.json.
bench: install
	$(PY) bench/pipeline_bench.py $(ARGS)

bench-coordinator: install
	$(PY) bench/coordinator_bench.py
