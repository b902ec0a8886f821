"""The worked example of docs/JOBS.md, a user's own pipeline that is not in dags/
(docs/examples/energy_daily.py: smart-meter readings, three tasks, two Delta tables), run
as that very file under `airflow standalone` (scheduler, triggerer, api-server) in connect
mode against the test session's Spark Connect server, runs triggered day by day through
Airflow's REST API, then with a correction inside the offsets' window and one
of a file landed a month earlier: the published tables equal an independent pandas
computation over the raw files as they are now, nothing counted twice."""

from __future__ import annotations

import io
import os
import random
import shutil
from datetime import date, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from bench.harness.airflow_standalone import Standalone, connect_env
from bench.harness.oracle import published
from checkpointing import Coordinator, LocalStorage

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
DAG = "energy_daily"
SITES = ["north", "south", "harbour"]


def readings_file(day: date, seed: int, bad: int = 4) -> bytes:
    """A day of hourly readings of 12 meters, ``bad`` of them malformed."""
    rnd = random.Random(seed)
    rows = []
    for m in range(12):
        for h in range(24):
            ts = datetime(day.year, day.month, day.day, h).strftime("%Y-%m-%d %H:%M:%S")
            rows.append([f"m{m:02d}", SITES[m % 3], ts, f"{rnd.uniform(0.1, 5.0):.3f}"])
    for j, i in enumerate(rnd.sample(range(len(rows)), bad)):
        col, value = [(2, "yesterday"), (3, "n/a"), (3, "-1.5")][j % 3]
        rows[i][col] = value
    rows.append(rows[5])  # a reading sent twice
    return pd.DataFrame(rows, columns=["meter_id", "site", "ts", "kwh"]).to_csv(
        index=False).encode()


def oracle(data: LocalStorage, until: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(daily usage, site records, malformed rows) from the raw files, in pandas."""
    frames = []
    for o in data.list("raw/readings/"):
        day = o.key.rsplit("/", 1)[-1][:10]
        if day < until:
            frames.append(pd.read_csv(io.BytesIO(data.read(o.key)[0]), dtype=str)
                          .assign(day=day))
    raw = pd.concat(frames, ignore_index=True)
    ts = pd.to_datetime(raw["ts"], errors="coerce", format="%Y-%m-%d %H:%M:%S")
    kwh = pd.to_numeric(raw["kwh"], errors="coerce")
    ok = raw["meter_id"].notna() & ts.notna() & (kwh >= 0)
    good = raw[ok].assign(ts=ts[ok], kwh=kwh[ok]).drop_duplicates(["meter_id", "ts"])
    daily = good.groupby(["site", "day"]).agg(kwh=("kwh", "sum"),
                                              readings=("kwh", "size")).reset_index()
    best = daily.sort_values(["site", "kwh", "day"], ascending=[True, False, True]) \
        .groupby("site").head(1).set_index("site")
    records = daily.groupby("site").agg(total_kwh=("kwh", "sum")).join(
        best[["day", "kwh"]].rename(columns={"day": "best_day", "kwh": "best_day_kwh"}))
    return daily, records.reset_index(), int((~ok).sum())


def check(c: Coordinator, data: LocalStorage, until: str) -> None:
    want_daily, want_records, _ = oracle(data, until)
    got = published(c, "energy_daily_usage").sort_values(["site", "day"]).reset_index(drop=True)
    want = want_daily.sort_values(["site", "day"]).reset_index(drop=True)
    assert got[["site", "day", "readings"]].values.tolist() == \
        want[["site", "day", "readings"]].values.tolist()
    assert got["kwh"].tolist() == pytest.approx(want["kwh"].tolist())
    rec = published(c, "energy_site_records").sort_values("site").reset_index(drop=True)
    assert rec["best_day"].tolist() == want_records["best_day"].tolist()
    for col in ("total_kwh", "best_day_kwh"):
        assert rec[col].tolist() == pytest.approx(want_records[col].tolist()), col


def test_the_worked_example_of_jobs_md_under_airflow(spark_connect, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "docs/examples/energy_daily.py", dags / "energy_daily.py")
    data = LocalStorage(tmp_path / "data")
    days = [date(2024, 1, d) for d in (1, 2, 3)]
    for i, d in enumerate(days):
        data.write(f"raw/readings/{d}.csv", readings_file(d, seed=i))
    first = tmp_path / "data/raw/readings/2024-01-01.csv"
    month_ago = first.stat().st_mtime - 30 * 86400  # landed a month before the others
    os.utime(first, (month_ago, month_ago))
    sa = Standalone(tmp_path / "airflow", ready_dag=DAG, AIRFLOW__CORE__DAGS_FOLDER=str(dags),
                    CKPT_STORAGE=f"file://{tmp_path}/ckpt",
                    CKPT_DATA=f"file://{tmp_path}/data", **connect_env(spark_connect))
    try:
        sa.start()
        _run_epochs(sa, data, days, tmp_path)
    finally:
        sa.stop()


def _trigger(sa: Standalone, logical: str) -> None:
    run = sa.trigger(DAG, f"{logical}T00:00:00Z")
    state = sa.wait_run(DAG, run, timeout=600)
    assert state == "success", (state, sa.task_tries(DAG, run), sa.tail())


def _run_epochs(sa: Standalone, data: LocalStorage, days: list[date], tmp_path: Path) -> None:
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), DAG)
    for d in days:
        run = (d + timedelta(days=1)).isoformat()
        _trigger(sa, run)
        check(c, data, run)
    quarantined = sum(c.completed_handles(e)["readings"].row_counts["rows_quarantined"]
                      for e in (1, 2, 3))
    assert quarantined == oracle(data, "2024-01-04")[2] > 0

    # Corrections: day 3 re-sent inside the window, day 1 re-sent a month after it landed.
    data.write("raw/readings/2024-01-03.csv", readings_file(days[2], seed=30, bad=0))
    data.write("raw/readings/2024-01-01.csv", readings_file(days[0], seed=10, bad=0))
    _trigger(sa, "2024-01-05")
    h = c.completed_handles(4)["readings"]
    assert (h.row_counts["files_new"], h.row_counts["files_replaced"]) == (2, 2)
    assert h.metrics["days_touched"] == ["2024-01-01", "2024-01-03"]
    check(c, data, "2024-01-04")
