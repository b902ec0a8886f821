"""The second pipeline, dags/aircraft_utilisation.py (TaskFlow, public API only), run as that
very file under `airflow dags test` day by day: its published table equals an independent
pandas computation over the raw files and the aircraft register; a task that fails after
writing its state is retried, restores the previous totals and does not double count; the
commit step's asset event carries the epoch."""

from __future__ import annotations

import io
import os
import sqlite3
from datetime import date

import pandas as pd
import pytest

from bench.harness.airflow_env import airflow, airflow_env, migrate
from bench.harness.oracle import published
from checkpointing import Coordinator, LocalStorage
from spark_jobs.flights.landing import land

pytestmark = pytest.mark.slow
DAG = "aircraft_utilisation"
DAYS = [date(2013, 1, d) for d in (1, 2, 3)]


def oracle(data: LocalStorage, until: str) -> pd.DataFrame:
    frames = [pd.read_csv(io.BytesIO(data.read(o.key)[0])) for o in data.list("raw/flights/")
              if o.key.rsplit("/", 1)[-1][:10] < until]
    f = pd.concat(frames, ignore_index=True)
    f = f[f.tailnum.notna() & f.dep_time.notna()]
    g = f.assign(air_time=f.air_time.fillna(0.0)).groupby("tailnum").agg(
        flights=("tailnum", "size"), distance=("distance", "sum"),
        air_time=("air_time", "sum")).reset_index()
    planes = pd.read_csv(io.BytesIO(data.read("raw/dims/planes.csv")[0]))
    return g.merge(planes[["tailnum", "manufacturer", "seats"]], on="tailnum", how="left")


def check(c: Coordinator, data: LocalStorage, until: str) -> None:
    got = published(c, "gold_aircraft_utilisation").sort_values("tailnum")
    want = oracle(data, until).sort_values("tailnum")
    assert len(got) == len(want) > 100
    for col in ("flights", "distance", "air_time"):
        assert got[col].tolist() == pytest.approx(want[col].tolist()), col
    assert got["manufacturer"].fillna("").tolist() == want["manufacturer"].fillna("").tolist()


def correct(data: LocalStorage, key: str) -> None:
    """Rewrite a raw file as a correction: 100 flights fewer, every distance + 1."""
    f = pd.read_csv(io.BytesIO(data.read(key)[0])).iloc[100:]
    data.write(key, f.assign(distance=f.distance + 1).to_csv(index=False).encode())


def test_aircraft_dag_days_retry_and_asset_events(tmp_path):
    data = LocalStorage(tmp_path / "data")
    land(data, DAYS, weather=False)
    month = 30 * 86400
    for key in ("raw/flights/2013-01-01.csv",):  # landed a month before the others
        t = (data.root / key).stat().st_mtime - month
        os.utime(data.root / key, (t, t))
    env = airflow_env(tmp_path / "airflow", CKPT_STORAGE=f"file://{tmp_path}/ckpt",
                      CKPT_DATA=f"file://{tmp_path}/data", AIRCRAFT_RETRIES="1")
    migrate(env)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), DAG)
    r = airflow(env, "dags", "test", DAG, "2013-01-02")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    check(c, data, "2013-01-02")
    # Day 2: utilisation fails after writing its state, before acknowledging; its retry
    # restores epoch 1's totals and adds day 2 once.
    r = airflow({**env, "CKPT_FAULT_INJECT": "utilisation:1"}, "dags", "test", DAG,
                "2013-01-03")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert c.latest_completed() == 2
    handles = c.completed_handles(2)
    assert handles["utilisation"].attempt == 2 and handles["tail_delta"].attempt == 1
    assert handles["tail_delta"].row_counts["files_new"] == 1
    check(c, data, "2013-01-03")
    r = airflow(env, "dags", "test", DAG, "2013-01-04")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    check(c, data, "2013-01-04")

    # Corrections: day 3's file rewritten within the offsets' window, and day 1's file,
    # landed 30 days before the others (outside the window), rewritten now. Both are
    # replaced files: their old contribution is retracted, nothing counted twice.
    correct(data, "raw/flights/2013-01-01.csv")
    correct(data, "raw/flights/2013-01-03.csv")
    r = airflow(env, "dags", "test", DAG, "2013-01-05")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    delta = c.completed_handles(4)["tail_delta"]
    assert (delta.row_counts["files_new"], delta.row_counts["files_replaced"]) == (2, 2)
    assert delta.metrics["days_touched"] == ["2013-01-01", "2013-01-03"]
    check(c, data, "2013-01-04")

    db = sqlite3.connect(tmp_path / "airflow" / "airflow.db")
    rows = db.execute(
        "select e.extra from asset_event e join asset a on a.id = e.asset_id "
        "where a.name = 'aircraft_utilisation.gold_aircraft_utilisation' order by e.id"
    ).fetchall()
    import json

    assert [json.loads(x)["epoch_id"] for (x,) in rows] == [1, 2, 3, 4]
