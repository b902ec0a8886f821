"""The Docker image and the compose deployment, built and run for real (podman here, the
docker CLI elsewhere): the image built from the wheel on the local bases, every service of
docker/docker-compose.yml started in its container and healthy, daily epochs of
flights_daily through the Celery workers, a worker container killed mid-task and the run
restored on the other, the published tables equal to the pandas oracle; tpch_daily at
SF 0.1 (history, then daily epochs with a deletion day) equal to DuckDB; `down -v` leaves
no container, volume or network. `make test-containers` (minutes: not in `make test`).
The other drills (scheduler, MinIO and Spark worker containers, a backfill from a
savepoint) are `make drills-containers`."""

from __future__ import annotations

import os
import subprocess
from datetime import date, timedelta
from pathlib import Path

import pytest

from bench.drills import DRILL_ENV, VICTIM_TASK, Airflow, Containers, Drills
from bench.harness import tpch_oracle
from checkpointing import Coordinator
from checkpointing.storage import open_storage
from scripts.compose import Compose

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(5400)]


def _sh(*cmd: str, timeout: float = 3600) -> str:
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (cmd, r.stderr[-3000:], r.stdout[-2000:])
    return r.stdout


@pytest.fixture(scope="module")
def deployment():
    _sh("scripts/container_images.sh", "bases")
    _sh("scripts/container_images.sh", "build")
    c = Compose(local=True, airflow_env=DRILL_ENV)
    c.down()  # a previous run's leftovers
    try:
        c.up()
        yield c
    finally:
        left = c.down()
        assert left == [], left


def test_the_image_is_what_a_platform_team_expects(deployment):
    """Non-root, no build tool or cache in the final stage, the provider from the wheel
    with its extras, the S3A jars where the runtime looks."""
    run = ("podman", "run", "--rm", "dag-checkpoints:local")
    assert _sh(*run, "id", "-u").strip() == "50000"
    assert _sh(*run, "sh", "-c", "command -v mvn gcc javac || true").strip() == ""
    assert _sh(*run, "sh", "-c", "ls /root/.cache /root/.m2 /dist 2>/dev/null || true") == ""
    out = _sh(*run, "python", "-c",
              "import importlib.metadata as m, os, dag_checkpoints, openlineage.client;"
              "print(m.version('dag-checkpoints'));"
              "print(dag_checkpoints.__file__);"
              "print(sorted(os.listdir(os.environ['CKPT_SPARK_JARS_DIR'])))")
    version, where, jars = out.splitlines()
    assert "site-packages" in where and version
    assert "hadoop-aws" in jars and "bundle-" in jars


def test_daily_epochs_and_a_killed_worker_container(deployment):
    d = Drills(Containers(deployment))
    first = [d.clean_epoch() for _ in range(2)][0]
    assert d.coord.latest_completed() == 2

    # The UI shows a task's log, fetched from the worker container that ran it, without
    # pyspark's warnings about the session the task itself closed at its end.
    events = d.af.log_events(first, VICTIM_TASK, 1)
    assert isinstance(events, list), events
    lines = [str(e.get("event")) if isinstance(e, dict) else str(e) for e in events]
    assert any(line.startswith("acknowledged epoch 1 as attempt 1") for line in lines), \
        lines[-8:]
    assert not [line for line in lines if "ReleaseExecute failed" in line]

    # A Celery worker's container killed while it runs a Spark task.
    # (A run whose task ended before the kill completes; the next is killed sooner.)
    by_host = {c["hostname"]: n for n, c in deployment.containers().items()
               if c["service"] == "airflow-worker"}
    killed = d.kill_worker_mid_task((5, 2))
    run_id, logical, victim = killed.run_id, killed.logical, killed.worker
    assert killed.ti["state"] == "running", killed  # killed mid-task
    state = d.finish(run_id, logical)
    tis = d.af.task_instances(run_id)
    assert state == "success", {t: (x["state"], x["try_number"]) for t, x in tis.items()}
    assert tis[VICTIM_TASK]["try_number"] >= 2
    assert by_host.get(tis[VICTIM_TASK]["hostname"]) != victim
    handle = d._handle(run_id, VICTIM_TASK)
    assert handle.restored_from == {"epoch_id": d.triggered - 1}, handle.restored_from
    deployment.start(victim)

    d.clean_epoch()  # and the deployment goes on
    assert d.coord.latest_completed() == d.triggered and d.completed_once(run_id)
    verdict, lost, dup = d.check()
    assert (verdict, lost, dup) == ("ok", 0, 0)


_CATALOG_PROBE = """
from checkpointing.tables.metastore import MetastoreNames
from spark_jobs.runtime import spark_session
spark = spark_session("catalog-probe", remote="sc://spark-connect:15002")
spark.sql("CREATE SCHEMA IF NOT EXISTS probe")
spark.sql("CREATE TABLE IF NOT EXISTS probe.t (a INT) USING delta "
          "LOCATION 's3a://flights/probe/t'")
spark.sql("INSERT INTO probe.t VALUES (1), (2)")
print("LOCATION", MetastoreNames.from_env().location_of("probe.t"))
print("ROWS", spark.sql("SELECT count(*) FROM probe.t").collect()[0][0])
spark.stop()
"""


def test_spark_s_catalog_lives_on_the_deployment_s_postgresql(deployment):
    """Spark's catalog over the metastore metastore-init made on the deployment's
    PostgreSQL: from a worker container, a Delta table created by name through the Connect
    server, queried by name, and its location found by the lookup an epoch's begin makes
    for a table input named in the catalog."""
    worker = sorted(n for n, c in deployment.containers().items()
                    if c["service"] == "airflow-worker")[0]
    out = _sh(deployment.engine, "exec", worker, "python", "-c", _CATALOG_PROBE, timeout=600)
    assert "LOCATION s3://flights/probe/t" in out and "ROWS 2" in out, out[-2000:]


_ICEBERG_PROBE = """
import json, os
from checkpointing import Coordinator, TableSpec
from checkpointing.protocol.barrier import TaskPlan
from checkpointing.storage import open_storage
from checkpointing.tables.iceberg import open_table
from spark_jobs.runtime import JobResult, run_task, spark_session
endpoint = os.environ["AWS_ENDPOINT_URL"]
c = Coordinator(open_storage("s3://checkpoints/iceberg-probe"), "iceberg_probe")
spec = TableSpec("s3://flights/iceberg/probe/t", "append", format="iceberg", name="probe.t",
                 catalog="lake")
spark = spark_session("iceberg-probe", remote="sc://spark-connect:15002")
for n, rows in ((1, [("a", 1), ("b", 2)]), (2, [("c", 3)])):
    b = c.begin_epoch({"gold": TaskPlan((), True)}, f"r{n}")

    def job(run, rows=rows):
        run.write_table(run.spark.createDataFrame(rows, "key string, value long"), "t", spec,
                        rows=len(rows))
        return JobResult(row_counts={"t": len(rows)})

    run_task(job, c, b.epoch_id, "gold", 1, spark, "", endpoint_url=endpoint)
    c.complete(b.epoch_id)
table = open_table(spec, endpoint)
out = {"pyiceberg": {}, "spark": {}}
for s in table.snapshots():
    rows = table.scan(snapshot_id=s.snapshot_id).to_arrow().select(["key", "value"])
    out["pyiceberg"][str(s.snapshot_id)] = sorted([d["key"], d["value"]]
                                                  for d in rows.to_pylist())
snaps = spark.sql("SELECT snapshot_id, summary['ckpt.epoch_id'] AS epoch "
                  "FROM lake.probe.t.snapshots ORDER BY committed_at").collect()
out["epochs"] = [r.epoch for r in snaps]
for r in snaps:
    out["spark"][str(r.snapshot_id)] = sorted(
        [list(x) for x in spark.sql(f"SELECT key, value FROM lake.probe.t "
                                    f"VERSION AS OF {r.snapshot_id}").collect()])
spark.stop()
print("RESULT " + json.dumps(out))
"""


def test_one_iceberg_catalog_on_the_deployment_s_postgresql(deployment):
    """The Iceberg catalog ``lake`` of the compose file, shared: from a worker container, two
    epochs of a job writing an Iceberg output through the Connect server, committed by the
    worker's committer (pyiceberg) to the catalog's database, which metastore-init made on
    the deployment's PostgreSQL; then the Connect server's Spark, which never committed to
    that table, names it ``lake.probe.t``: its ``snapshots`` table shows one snapshot per
    epoch, and ``VERSION AS OF`` each reads what pyiceberg reads there."""
    import json

    worker = sorted(n for n, c in deployment.containers().items()
                    if c["service"] == "airflow-worker")[0]
    out = _sh(deployment.engine, "exec", worker, "python", "-c", _ICEBERG_PROBE, timeout=900)
    result = json.loads([x for x in out.splitlines() if x.startswith("RESULT ")][-1][7:])
    assert result["epochs"] == ["1", "2"], result
    assert result["spark"] == result["pyiceberg"], result
    assert sorted(result["spark"].values(), key=len)[-1] == [["a", 1], ["b", 2], ["c", 3]]
    pg = sorted(n for n, c in deployment.containers().items() if c["service"] == "postgres")[0]
    tables = _sh(deployment.engine, "exec", pg, "psql", "-U", "airflow", "-d",
                 "iceberg_catalog", "-qtAc",
                 "SELECT table_namespace || '.' || table_name FROM iceberg_tables "
                 "WHERE catalog_name = 'lake'")
    assert tables.split() == ["probe.t"], tables


def test_every_service_runs_in_its_container_healthy(deployment):
    """(The module's teardown asserts that `down -v` leaves nothing.)"""
    cs = deployment.containers()
    services = {c["service"] for c in cs.values()}
    assert {"postgres", "redis", "minio", "spark-master", "spark-worker", "spark-connect",
            "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "airflow-worker"} <= services
    running = [n for n, c in cs.items() if c["state"] == "running"]
    assert len([n for n in running if cs[n]["service"] == "airflow-worker"]) == 2
    assert all(deployment.healthy(n, cs[n]) for n in running), cs


def test_tpch_daily_at_sf01_equals_duckdb(deployment):
    """TPC-H SF 0.1 landed on the deployment's MinIO from this host: the history, then two
    order days (the second with deletions), each run's published outputs equal to DuckDB
    over tpchgen-cli's own files."""
    from spark_jobs.tpch.landing import DEFAULT_CACHE, generate, land

    env = deployment.airflow_env()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        os.environ[k] = env[k]
    endpoint = env["AWS_ENDPOINT_URL"]
    history_until, days = date(1998, 6, 1), 2
    landed = land(open_storage(env["CKPT_DATA"], endpoint_url=endpoint), 0.1, history_until,
                  days, delete_every=2, deletes=5)
    generated = generate(0.1, DEFAULT_CACHE)
    c = Coordinator(open_storage(env["CKPT_STORAGE"], endpoint_url=endpoint), "tpch_daily")
    af = Airflow(deployment.api_url, env["AIRFLOW_ADMIN_PASSWORD"], dag="tpch_daily")
    for i in range(days + 1):  # the history's run, then one run per order day
        logical = history_until + timedelta(days=i)
        run_id = af.trigger(logical)
        state = af.wait_run(run_id, timeout=1800)
        tis = af.task_instances(run_id)
        assert state == "success", {t: (x["state"], af.error_of(run_id, t, x["try_number"]))
                                    for t, x in tis.items() if x["state"] != "success"}
        until = logical.isoformat()
        deleted = sorted(k for d, keys in landed.deletes.items() if d < until for k in keys)
        tpch_oracle.check_published(c, generated, until, deleted)
    assert c.latest_completed() == days + 1
    assert any(d < (history_until + timedelta(days=days)).isoformat()
               for d in landed.deletes), "no deletion day was run"
