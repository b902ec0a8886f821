# The two commands a new user needs: `make test` and (later) `make demo`.
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: install demo docs docs-serve bench-check test test-tools test-fast test-integration test-system test-package test-containers lint bench bench-coordinator bench-verify bench-airflow bench-tables bench-sources bench-table-inputs bench-table-inputs-dv bench-table-inputs-iceberg bench-catalog bench-scale bench-scale-topology bench-views faults soak drills drills-containers

install:
	scripts/bootstrap.sh

# The pipeline in a real Airflow on local storage; ARGS=--s3 for MinIO (installed on first
# use: building it takes 3-11 minutes). Ctrl-C, SIGTERM or closing the terminal stops it.
demo: install
	$(PY) scripts/demo.py $(ARGS)

# The whole suite, three test modules at a time on 2 cores (the cores are saturated: a fourth
# worker made it slower; the order is tests/support/schedule.py's; modules share nothing but
# PostgreSQL's server, where each has a database of its own). pytest exits 5 when it
# collects nothing; make treats any non-zero exit as failure, so "no tests" never passes.
# TEST_SKIP=<dirs>: what ran already (.ci/run runs tests/unit beside the package tier).
test: test-tools
	CKPT_TEST_PG_URL=$$(scripts/start_postgres.sh) $(PY) -m pytest -q -p no:cacheprovider \
		-n 3 --dist loadfile --no-loadscope-reorder --durations=25 --ignore=tests/package \
		--ignore=tests/containers --ignore=tests/system/test_tutorial.py -m "not bench" \
		$(addprefix --ignore=,$(TEST_SKIP))

# What the suite's servers and JVMs need, built or fetched once per checkout (MinIO and
# toxiproxy from the Go proxy, Spark's S3A jars, a headless browser, the class-data
# sharing archive of Spark's classes: about a minute, half the CPU each JVM spends
# starting); `make test` runs it first.
test-tools: install
	scripts/install_minio.sh
	scripts/install_spark_s3.sh
	scripts/install_browser.sh
	scripts/install_toxiproxy.sh
	$(PY) -m tests.support.spark_cds

# The unit tier, tests/unit/: no JVM, no server (the coordinator, the protocol, state, the
# provider's units): 75-80 s on 2 cores once .venv exists; `make test` runs it with the rest.
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider -n 2 tests/unit

# The integration tier, tests/integration/: Spark (local, standalone, Connect), MinIO,
# PostgreSQL, the table formats' readers; the unit tier's storage tests again on MinIO.
test-integration: test-tools
	CKPT_TEST_PG_URL=$$(scripts/start_postgres.sh) $(PY) -m pytest -q -p no:cacheprovider \
		-n 3 --dist loadfile --no-loadscope-reorder -m "not bench" tests/integration

# The system tier, tests/system/: Airflow (dags test, standalone, the Celery topology on
# PostgreSQL), the fault matrices, the demo and the README's commands.
test-system: test-tools
	CKPT_TEST_PG_URL=$$(scripts/start_postgres.sh) $(PY) -m pytest -q -p no:cacheprovider \
		-n 3 --dist loadfile --no-loadscope-reorder --ignore=tests/system/test_tutorial.py \
		tests/system

# The benchmark scripts run end to end on little data and write their documented keys
# (tests/integration/test_bench.py; measurements, so not in `make test`; .ci/run runs it
# after `make test`),
# two scripts at a time (one alone leaves a core idle for most of its run).
bench-check: install
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist load -m bench tests/integration/test_bench.py

# The package as users install it: sdist and wheel built by the standard front-end, a fresh
# virtual environment with Airflow and the wheel's [connect,delta] extras, a user DAG run
# from it (tests/package/; minutes: installing Airflow afresh); and the tutorial, followed
# in order from `make demo` to a DAG of your own on that wheel (tests/system/test_tutorial.py).
test-package: install
	$(PY) -m pytest -q -p no:cacheprovider tests/package tests/system/test_tutorial.py

# The image and the compose deployment in containers (podman or Docker; 20-40 minutes, so
# not in .ci/run): Debian's podman installed as root when no engine runs, the local base
# images, the project image, every service up, epochs and a killed worker.
test-containers: install
	scripts/install_podman.sh
	$(PY) -m pip install -q podman-compose==1.5.0
	$(PY) -m pytest -q -p no:cacheprovider tests/containers

# The documentation site (MkDocs): docs/*.md plus the pages docs/hooks.py generates from
# the code; --strict fails on any warning (a broken link, a docstring that does not parse).
docs: install
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet
	@echo "site built in site/ (make docs-serve: http://127.0.0.1:8000)"

docs-serve: install
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve --strict -a 127.0.0.1:8000

# ruff, then mypy as pyproject.toml's [tool.mypy] sets it, over every Python folder but the
# tests: strict over the core and the job runtime, the provider checked with Airflow's
# partial typing, the pipelines, example DAGs, benchmarks and scripts without strict flags.
lint: install
	.venv/bin/ruff check .
	.venv/bin/mypy

# Checkpointing vs full recompute vs Structured Streaming, then a DAG run under a real
# scheduler per Spark mode; both write bench/results/latest.json.
bench: install
	$(PY) bench/pipeline_bench.py $(ARGS)
	$(PY) bench/airflow_bench.py $(filter --quick,$(ARGS))

# The fault-injection matrix (bench/results/faults.json); `make soak` repeats it over 5 seeds
# (bench/results/soak.json, next to the one-seed results)
faults: install
	scripts/install_minio.sh
	scripts/install_spark_s3.sh
	scripts/install_toxiproxy.sh
	$(PY) bench/faults.py --remote auto $(ARGS)

# ... and the table-input histories' properties (Spark-, delta-rs- and pyiceberg-written
# upstreams) with many examples each (HISTORY_EXAMPLES, default 60; `make test` draws 1,
# 25 and 15), the Spark one printing how many it drew.
soak: install
	$(MAKE) faults ARGS="--soak --out bench/results/soak.json $(ARGS)"
	scripts/install_spark_s3.sh
	CKPT_HISTORY_EXAMPLES=$${HISTORY_EXAMPLES:-60} $(PY) -m pytest -q -s -p no:cacheprovider \
		tests/integration/test_delta_histories.py tests/unit/test_delta_rs_histories.py \
		tests/unit/test_iceberg_histories.py -k "sum_to"
	CKPT_HISTORY_EXAMPLES=$${VIEW_EXAMPLES:-10} $(PY) -m pytest -q -s -p no:cacheprovider \
		tests/integration/test_ivm_spark.py tests/integration/test_view_tasks.py \
		tests/integration/test_view_files.py -k "after_every_epoch or batch_query"

bench-coordinator: install
	$(PY) bench/coordinator_bench.py

# A begin's check of unchanged state against its verification record, local and on MinIO.
bench-verify: install
	scripts/install_minio.sh
	$(PY) bench/verify_bench.py $(ARGS)

# Table outputs on MinIO: one Delta commit per output and epoch (time, S3 requests), and a
# consumer reading the table vs the manifest (bench/results/latest.json, table_* keys).
bench-tables: install
	scripts/install_minio.sh
	$(PY) bench/table_bench.py $(ARGS)

# A source task's input discovery after 30 and 360 days, with an old file corrected
# (bench/source_bench.py; seconds).
bench-sources: install
	$(PY) bench/source_bench.py $(ARGS)

# Table inputs (PROTOCOL 6.14): a downstream pipeline over an upstream Delta table of 10
# million rows changed by 1 % per version, 100 versions (bench/table_input_bench.py,
# table_input_* keys; ARGS="--rows 1000000 --versions 20" for a quicker run).
bench-table-inputs: install
	$(PY) bench/table_input_bench.py $(ARGS)

# The same over an upstream Spark writes with deletion vectors (a DELETE and an append of 1 %
# per step; table_input_dv_* keys).
bench-table-inputs-dv: install
	$(PY) bench/table_input_bench.py --dv $(ARGS)

# The same over an Iceberg upstream Spark writes merge-on-read (position delete files; a
# DELETE and an append of 1 % per step; table_input_iceberg_deletes_* keys).
bench-table-inputs-iceberg: install
	$(PY) bench/table_input_bench.py --iceberg $(ARGS)

# What a catalog name costs a Delta output's commits on MinIO (catalog_* keys).
bench-catalog: install
	scripts/install_minio.sh
	$(PY) bench/catalog_bench.py $(ARGS)

# tpch_daily at scale factor 10 on local storage, Spark Connect (bench/tpch_bench.py, tpch_*
# keys; about an hour on 2 cores). ARGS="--scale 1" for a quicker run.
bench-scale: install
	$(PY) bench/tpch_bench.py --scale 10 $(ARGS)

# TPC-H's 22 queries as incremental views: a refresh of 0.1 % of the orders maintained, each
# against the query recomputed, and against a Declarative Pipeline's materialized views
# (bench/views_bench.py; ARGS=--scale 0.1 for a shorter run).
bench-views: install
	$(PY) bench/views_bench.py --sdp $(ARGS)

# tpch_daily at scale factor 1 through the deployment topology (scripts/cluster.sh's
# processes, CeleryExecutor), a Celery worker killed mid-task (bench/tpch_topology.py).
bench-scale-topology: install
	scripts/install_minio.sh
	scripts/install_spark_s3.sh
	$(PY) bench/tpch_topology.py $(ARGS)

# One flights_daily DAG run under `airflow standalone`, tasks on local Spark vs Spark Connect.
bench-airflow: install
	$(PY) bench/airflow_bench.py $(ARGS)

# The compose deployment as processes (scripts/cluster.sh up|down|status), broken five ways:
# a Celery worker, the scheduler, MinIO and the Spark worker killed mid-epoch, and a backfill
# from a savepoint; each checked against the oracle (bench/results/drills.json).
drills: install
	scripts/install_minio.sh
	scripts/install_spark_s3.sh
	$(PY) bench/drills.py $(ARGS)

# The same drills against the compose deployment in containers (podman or docker): a
# service's death is its container killed (bench/results/drills-containers.json).
drills-containers: install
	scripts/install_podman.sh
	$(PY) -m pip install -q podman-compose==1.5.0
	scripts/container_images.sh bases
	scripts/container_images.sh build
	$(PY) bench/drills.py --containers $(ARGS)
