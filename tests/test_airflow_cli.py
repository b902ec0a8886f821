"""`ckpt-airflow backfill` against a real Airflow metadata database (SQLite): it records the
lineage's origin and creates the backfill through Airflow's own machinery, with the lineage
in every run's conf; a bad request changes nothing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checkpointing import Coordinator, LocalStorage
from checkpointing.lineages import list_origins, read_origin
from spark_jobs.flights.pipeline import EDGES, PUBLISHING
from tests.airflow_env import airflow, airflow_env, migrate
from tests.helpers import ack_task

CKPT_AIRFLOW = str(Path(sys.executable).parent / "ckpt-airflow")
pytestmark = pytest.mark.slow


@pytest.fixture
def af(tmp_path):
    env = airflow_env(tmp_path / "airflow", CKPT_STORAGE=f"file://{tmp_path}/ckpt",
                      CKPT_DATA=f"file://{tmp_path}/data")
    migrate(env)
    # The input of the days the tests backfill has landed (the preview checks the DAG's
    # daily_inputs); no job reads it here.
    data = LocalStorage(tmp_path / "data")
    for day in range(1, 9):
        data.write(f"raw/flights/2013-01-{day:02d}.csv", b"year,month,day\n")
    r = airflow(env, "dags", "reserialize")
    assert r.returncode == 0, r.stderr[-2000:]
    # One completed epoch of the flights plan, written through the library.
    from checkpointing import plan_from_edges

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "flights_daily")
    b = c.begin_epoch(plan_from_edges(EDGES, PUBLISHING), "scheduled__2013-01-02")
    for task in EDGES:
        ack_task(c, b.epoch_id, task, files={"state": task.encode()}, tmp=tmp_path)
    c.complete(b.epoch_id)
    return env, tmp_path, c


def run_cli(env, *args):
    return subprocess.run([CKPT_AIRFLOW, *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_backfill_from_epoch_creates_airflow_backfill_and_lineage(af):
    env, tmp, c = af
    r = run_cli(env, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                "--first-day", "2013-01-02", "--last-day", "2013-01-04")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    origin = read_origin(c.storage, c.layout, out["lineage"])
    assert (origin.from_epoch, origin.start, origin.end, origin.publish_at) == \
        (1, "2013-01-03", "2013-01-05", "2013-01-05")
    db = sqlite3.connect(tmp / "airflow" / "airflow.db")
    (bf_id, conf, mar), = db.execute(
        "select id, dag_run_conf, max_active_runs from backfill where dag_id='flights_daily'")
    assert bf_id == out["backfill_id"] and mar == 1
    assert json.loads(conf) == {"checkpoint": {"lineage": out["lineage"]}}
    runs = db.execute("select logical_date, run_type, conf from dag_run "
                      "where dag_id='flights_daily' order by logical_date").fetchall()
    assert [r[0][:10] for r in runs] == ["2013-01-03", "2013-01-04", "2013-01-05"]
    assert {r[1] for r in runs} == {"backfill"}
    assert all(json.loads(r[2])["checkpoint"]["lineage"] == out["lineage"] for r in runs)


@pytest.mark.parametrize("args, message", [
    (["--from-epoch", "7"], "epoch 7 of flights_daily is unknown"),
    (["--from-savepoint", "nope"], "savepoint"),
])
def test_bad_backfill_request_is_one_line_and_records_nothing(af, args, message):
    env, _, c = af
    r = run_cli(env, "backfill", "--dag-id", "flights_daily", *args,
                "--first-day", "2013-01-02", "--last-day", "2013-01-04")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert list_origins(c.storage, c.layout) == []


def test_dry_run_previews_and_starts_nothing(af):
    env, tmp, c = af
    r = run_cli(env, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                "--first-day", "2013-01-02", "--last-day", "2013-01-03", "--dry-run")
    assert r.returncode == 0, r.stderr[-3000:]
    p = json.loads(r.stdout.strip().splitlines()[-1])
    assert p["runs"] == [{"logical_date": "2013-01-03", "data_day": "2013-01-02"},
                         {"logical_date": "2013-01-04", "data_day": "2013-01-03"}]
    assert p["origin"]["epoch_id"] == 1 and p["conflicts"] == []
    assert list_origins(c.storage, c.layout) == [] and _backfill_rows(tmp) == []


def _backfill_rows(tmp):
    db = sqlite3.connect(tmp / "airflow" / "airflow.db")
    return db.execute("select id from backfill where dag_id='flights_daily'").fetchall()


def test_backfill_over_a_run_in_flight_is_refused_naming_the_date(af):
    """Airflow would skip a date whose run is still in flight; the backfill would then never
    publish (its last date is the one that publishes): refused, nothing written."""
    env, tmp, c = af
    r = airflow(env, "dags", "trigger", "flights_daily", "--logical-date", "2013-01-05")
    assert r.returncode == 0, r.stderr[-2000:]  # queued: no scheduler runs here
    r = run_cli(env, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                "--first-day", "2013-01-02", "--last-day", "2013-01-04")
    assert r.returncode == 2, r.stdout[-2000:]
    assert "would not run 2013-01-05" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert list_origins(c.storage, c.layout) == [] and _backfill_rows(tmp) == []


def test_backfill_airflow_refuses_leaves_no_lineage(af):
    env, tmp, c = af
    first = run_cli(env, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                    "--first-day", "2013-01-02", "--last-day", "2013-01-03")
    assert first.returncode == 0, first.stderr[-2000:]
    lineage = json.loads(first.stdout.strip().splitlines()[-1])["lineage"]
    assert json.loads(first.stdout.strip().splitlines()[-1])["runs"] == [
        {"logical_date": "2013-01-03", "data_day": "2013-01-02"},
        {"logical_date": "2013-01-04", "data_day": "2013-01-03"}]
    # A second backfill while the first is active: Airflow refuses it.
    second = run_cli(env, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                     "--first-day", "2013-01-06", "--last-day", "2013-01-07")
    assert second.returncode == 2 and "Airflow refused" in second.stderr, second.stderr
    assert [o.lineage for o in list_origins(c.storage, c.layout)] == [lineage]
    assert len(_backfill_rows(tmp)) == 1


def test_backfill_request_ids_are_strict():
    from dag_checkpoints.api import BackfillRequest, SavepointRequest
    from pydantic import ValidationError

    for bad in (True, "1", 1.0):
        with pytest.raises(ValidationError):
            BackfillRequest.model_validate({"from_epoch": bad, "first_day": "2013-01-02",
                                            "last_day": "2013-01-03"})
        with pytest.raises(ValidationError):
            SavepointRequest.model_validate({"name": "sp", "epoch_id": bad})
    ok = BackfillRequest.model_validate({"from_epoch": 2, "first_day": "2013-01-02",
                                         "last_day": "2013-01-03"})
    assert ok.from_epoch == 2
