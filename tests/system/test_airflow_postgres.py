"""The plugin on the metadata database users deploy: `airflow standalone` (LocalExecutor) on
PostgreSQL (Debian's server, started by scripts/start_postgres.sh, which `make test` runs).
A triggered run completes its epoch, and a backfill from that epoch goes through Airflow's
backfill machinery, whose row locking differs between PostgreSQL and SQLite."""

from __future__ import annotations

import time
from datetime import date
from pathlib import Path

import pytest

from checkpointing import Coordinator, LocalStorage, read_manifest
from spark_jobs.flights.landing import land
from tests.airflow_standalone import Standalone, connect_env
from tests.pg import fresh_database

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # shares 2 cores with the fault matrix
ROOT = Path(__file__).resolve().parents[2]
DAG = "flights_daily"


@pytest.fixture(scope="module")
def af(tmp_path_factory, spark_connect):
    tmp = tmp_path_factory.mktemp("pg")
    land(LocalStorage(tmp / "data"), [date(2013, 1, 1), date(2013, 1, 2)], seed=11)
    url = fresh_database("ckpt_airflow_run")
    db_env = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
              "AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}
    sa = Standalone(tmp / "airflow", CKPT_STORAGE=f"file://{tmp}/ckpt",
                    CKPT_DATA=f"file://{tmp}/data", FLIGHTS_RETRIES="0", **db_env,
                    **connect_env(spark_connect))
    try:
        sa.start()
        yield sa, tmp
    finally:
        sa.stop()


def test_run_and_backfill_on_postgres(af):
    sa, tmp = af
    run = sa.trigger(DAG, "2013-01-02T00:00:00Z")
    assert sa.wait_run(DAG, run) == "success", sa.tail()
    c = Coordinator(LocalStorage(tmp / "ckpt"), DAG)
    assert c.latest_completed() == 1

    r = sa.post(f"/ckpt/api/dags/{DAG}/backfills",
                {"from_epoch": 1, "first_day": "2013-01-02", "last_day": "2013-01-02"})
    assert r.status_code == 201, r.text
    lineage, backfill_id = r.json()["lineage"], r.json()["backfill_id"]
    deadline = time.time() + 600
    while time.time() < deadline and \
            not sa.get(f"/api/v2/backfills/{backfill_id}").json().get("completed_at"):
        time.sleep(5)
    assert c.latest_completed(lineage) == 2, sa.tail()
    assert c.barrier(2).parent_epoch_id == 1
    m = read_manifest(c.storage, c.layout)
    assert (m.epoch_id, m.lineage) == (2, lineage)
    handles = c.completed_handles(2)
    assert sorted(handles["ingest_flights"].offsets["files"]) == [
        "raw/flights/2013-01-01.csv", "raw/flights/2013-01-02.csv"]
    # The runs are rows of the PostgreSQL database, not of some SQLite file.
    import psycopg2

    dsn = sa.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("postgresql+psycopg2", "postgresql")
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("select run_type, state from dag_run where dag_id = %s order by id", (DAG,))
        assert cur.fetchall() == [("manual", "success"), ("backfill", "success")]
