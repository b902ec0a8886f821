# The two commands a new user needs: `make test` and (later) `make demo`.
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: install test lint bench bench-coordinator faults soak

install:
	scripts/bootstrap.sh

# The whole suite. pytest exits 5 when it collects nothing; make treats any
# non-zero exit as failure, so "no tests" never passes.
test: install
	scripts/install_minio.sh
	scripts/install_spark_s3.sh
	scripts/install_browser.sh
	scripts/install_toxiproxy.sh
	CKPT_TEST_PG_URL=$$(scripts/start_postgres.sh) $(PY) -m pytest -q -p no:cacheprovider

lint: install
	.venv/bin/ruff check .

# Checkpointing vs full recompute vs Structured Streaming; writes bench/results/latest.json.
bench: install
	$(PY) bench/pipeline_bench.py $(ARGS)

# The fault-injection matrix (bench/results/faults.json); `make soak` repeats it over 5 seeds.
faults: install
	scripts/install_minio.sh
	scripts/install_spark_s3.sh
	scripts/install_toxiproxy.sh
	$(PY) bench/faults.py $(ARGS)

soak: install
	$(MAKE) faults ARGS="--soak $(ARGS)"

bench-coordinator: install
	$(PY) bench/coordinator_bench.py
