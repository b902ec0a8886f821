"""The flights jobs in Spark local mode, compared with an independent pandas computation."""

from __future__ import annotations

import io
from datetime import date

import pandas as pd
import pytest

from bench.harness import oracle
from bench.harness.oracle import assert_gold_matches_oracle, published, raw_files
from checkpointing import Coordinator, LocalStorage, read_manifest
from spark_jobs.flights.landing import land
from spark_jobs.flights.pipeline import run_epoch
from tests.support.helpers import FLIGHTS, sigkill_mid_epoch_then_rerun

D = [date(2013, 1, d) for d in range(1, 6)]
ROUTE, CARRIER = ["origin", "dest"], ["carrier"]


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.runtime import spark_session

    s = spark_session("tests")
    yield s
    s.stop()


@pytest.fixture
def env(tmp_path):
    data = LocalStorage(tmp_path / "data")
    ckpt = LocalStorage(tmp_path / "ckpt")
    return data, f"file://{tmp_path}/data", Coordinator(ckpt, "flights_daily")


def test_daily_epochs_equal_independent_computation(spark, env):
    data, data_uri, c = env
    injected = 0
    for i, day in enumerate(D[:3]):
        rep = land(data, [day], malformed_rate=0.02, seed=11, dims=(i == 0), weather=False)
        injected += sum(rep.malformed_by_file.values())
        epoch, meta = run_epoch(c, spark, data_uri, f"scheduled__{day}")
        assert meta.completed and meta.epoch_id == epoch == i + 1
        ingest = c.completed_handles(epoch)["ingest_flights"]
        assert ingest.row_counts["files_new"] == 1  # only the new day is read
    assert_gold_matches_oracle(c, data, ROUTE, "gold_route_stats")
    assert_gold_matches_oracle(c, data, CARRIER, "gold_carrier_stats")
    from spark_jobs.runtime import read_published
    via_spark = read_published(spark, c, "gold_carrier_stats").toPandas()
    # Spark reading the files of the epoch's table version equals delta-rs reading the
    # table, the partition column (the stats' hash bucket) typed as the table declares it.
    by_rs = published(c, "gold_carrier_stats")
    cols = sorted(by_rs.columns)
    assert sorted(via_spark.columns) == cols and str(via_spark["bucket"].dtype) == "int32"
    pd.testing.assert_frame_equal(
        via_spark[cols].sort_values("carrier").reset_index(drop=True),
        by_rs[cols].sort_values("carrier").reset_index(drop=True), check_dtype=False)
    quarantined = sum(c.completed_handles(e)["ingest_flights"].row_counts["rows_quarantined"]
                      for e in (1, 2, 3))
    rows, bad, _ = oracle.clean_flights(raw_files(data))
    assert quarantined == injected == bad > 0
    assert c.completed_handles(3)["ingest_flights"].row_counts["state_rows"] == len(rows)


def test_late_replaced_and_unreadable_files(spark, env):
    data, data_uri, c = env
    land(data, [D[0], D[2]], malformed_rate=0.05, seed=5, weather=False)
    run_epoch(c, spark, data_uri, "r1")
    # Day 2 arrives late, day 1 is replaced by a corrected file, day 4 is garbage.
    land(data, [D[1]], weather=False, dims=False)
    land(data, [D[0]], replace={D[0]}, weather=False, dims=False)
    land(data, [D[3]], unreadable={D[3]}, weather=False, dims=False)
    epoch, meta = run_epoch(c, spark, data_uri, "r2")
    assert meta.completed
    counts = c.completed_handles(epoch)["ingest_flights"].row_counts
    assert counts["files_new"] == 3 and counts["files_replaced"] == 1
    assert counts["files_unreadable"] == 1 and counts["rows_retracted"] > 0
    # The running count of the source's state, after retractions, is the oracle's rows.
    rows, _, _ = oracle.clean_flights(raw_files(data))
    assert counts["state_rows"] == len(rows)
    assert_gold_matches_oracle(c, data, ROUTE, "gold_route_stats")
    assert_gold_matches_oracle(c, data, CARRIER, "gold_carrier_stats")
    q = published_quarantine(c, epoch)
    assert q["reason"].str.startswith("unreadable_file").sum() == 1


def published_quarantine(c, epoch):
    out = c.completed_handles(epoch)["ingest_flights"].outputs["quarantine"]
    return pd.concat([pd.read_parquet(io.BytesIO(c.storage.read(
        c.storage.key_for_uri(f.uri))[0])) for f in out.files], ignore_index=True)


def _day(d: date) -> dict[str, str]:
    """The data interval of the run that consumes day ``d``'s files (it ends the next day)."""
    nxt = date.fromordinal(d.toordinal() + 1)
    return {"start": d.isoformat(), "end": nxt.isoformat()}


def test_crash_and_restore_equals_uninterrupted_run(spark, tmp_path):
    """Each epoch consumes its own day, so the epoch that crashes has new input: a retry
    that double counted day 2 (or lost it) would differ from the uninterrupted run."""
    days = D[:3]
    clean_data = LocalStorage(tmp_path / "data")
    land(clean_data, days, malformed_rate=0.01, seed=2, weather=False)
    uri = f"file://{tmp_path}/data"

    crashed = Coordinator(LocalStorage(tmp_path / "crash"), "p")
    run_epoch(crashed, spark, uri, "day1", data_interval=_day(days[0]))
    epoch, meta = run_epoch(crashed, spark, uri, "day2", stop_after="route_stats",
                            data_interval=_day(days[1]))
    assert meta is None  # the process "died" before carrier_stats ran
    assert crashed.completed_handles(1)["ingest_flights"].row_counts["files_new"] == 1
    restarted = Coordinator(LocalStorage(tmp_path / "crash"), "p")  # a new process
    # The same run id resumes its open epoch, as the next attempt.
    again, meta = run_epoch(restarted, spark, uri, "day2", data_interval=_day(days[1]))
    assert again == epoch and meta.completed
    ingest = restarted.completed_handles(epoch)["ingest_flights"]
    assert ingest.attempt == 1 and ingest.row_counts["files_new"] == 1  # not run again
    assert restarted.completed_handles(epoch)["carrier_stats"].attempt == 2
    # A run that completed answers with its epoch and runs nothing.
    assert run_epoch(restarted, spark, uri, "day2")[0] == epoch
    assert restarted.epoch_ids() == [1, 2]
    run_epoch(restarted, spark, uri, "day3", data_interval=_day(days[2]))
    # What an uninterrupted run publishes is the independent computation over the same days
    # (the oracle: pandas over the raw files), so the crashed run is compared with it.
    assert_gold_matches_oracle(restarted, clean_data, ROUTE, "gold_route_stats")
    assert_gold_matches_oracle(restarted, clean_data, CARRIER, "gold_carrier_stats")


def test_embedded_runner_killed_then_rerun_resumes(tmp_path):
    """`python -m spark_jobs.runtime.run_epoch` of the flights pipeline killed with SIGKILL
    mid-epoch, then run again with the same run id: it resumes the same epoch (no 'pending
    epoch' refusal), and the published tables equal the independent computation."""
    kill_mid_epoch_then_rerun(tmp_path)


def kill_mid_epoch_then_rerun(tmp_path, *extra: str) -> Coordinator:
    """The embedded runner (with ``extra`` arguments) SIGKILLed while its epoch is open and
    a task has acknowledged, rerun with the same run id; checked against the oracle."""
    import os
    import sys

    data = LocalStorage(tmp_path / "data")
    land(data, D[:2], weather=False)
    args = [sys.executable, "-m", "spark_jobs.runtime.run_epoch", *FLIGHTS, "--storage",
            f"file://{tmp_path}/ckpt", "--data", f"file://{tmp_path}/data", "--run-id", "r1",
            *extra]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "flights_daily")
    sigkill_mid_epoch_then_rerun(args, env, c, 1)
    assert c.epoch_ids() == [1]
    assert_gold_matches_oracle(c, data, ROUTE, "gold_route_stats")
    assert_gold_matches_oracle(c, data, CARRIER, "gold_carrier_stats")
    return c


def test_incremental_snapshot_writes_only_new_partitions(spark, env):
    data, data_uri, c = env
    for i, day in enumerate(D[:4]):
        land(data, [day], weather=False, dims=(i == 0))
        run_epoch(c, spark, data_uri, str(day))
    h = c.completed_handles(4)["ingest_flights"]
    assert h.metrics["partitions_rewritten"] == ["2013-01-04"]
    bronze = [f for f in h.files if f.name.startswith("bronze/")]
    fourth = sum(f.size for f in bronze if "part=2013-01-04/" in f.name)
    assert h.metrics["bytes_referenced"] == sum(f.size for f in bronze) - fourth
    assert 0 < fourth < 0.35 * h.state_size  # one day of four was uploaded


def _weather_frame(data: LocalStorage) -> pd.DataFrame:
    frames = [pd.read_csv(io.BytesIO(data.read(o.key)[0])) for o in data.list("raw/weather/")]
    w = pd.concat(frames, ignore_index=True)
    return w[(w.wind_speed.isna()) | (w.wind_speed <= 300)]


def test_enrich_joins_same_epoch_and_reenriches_late_weather(spark, env):
    data, data_uri, c = env
    land(data, D[:2])
    run_epoch(c, spark, data_uri, "d1-2")
    land(data, [D[2]], weather=False, dims=False)  # flights of day 3, weather not yet
    e2, _ = run_epoch(c, spark, data_uri, "d3-flights")
    day3 = published(c, "gold_flights_enriched").query("row_date == '2013-01-03'")
    assert len(day3) > 0 and day3["temp"].isna().all()
    land(data, [D[2]], dims=False)  # the weather file arrives late
    e3, _ = run_epoch(c, spark, data_uri, "d3-weather")
    assert c.completed_handles(e3)["enrich"].metrics["dates_recomputed"] == ["2013-01-03"]
    got = published(c, "gold_flights_enriched")
    rows, _, _ = oracle.clean_flights(raw_files(data))
    want = rows.merge(_weather_frame(data)[["origin", "time_hour", "temp"]],
                      on=["origin", "time_hour"], how="left")
    assert len(got) == len(want)
    assert got["temp"].notna().sum() == want["temp"].notna().sum() > 0
    assert got["temp"].sum() == pytest.approx(want["temp"].sum())
    assert got["airline"].notna().all()


def test_failed_expectations_decline_and_publish_nothing(spark, env):
    data, data_uri, c = env
    alerts = []
    c = Coordinator(c.storage, c.pipeline_id, on_abort=lambda meta, barrier: alerts.append(meta))
    land(data, [D[0]], weather=False)
    run_epoch(c, spark, data_uri, "good")
    before = read_manifest(c.storage, c.layout)
    # A day where every flight left 1000 minutes late: within the parser's range, but no
    # route's average delay is plausible.
    df = pd.read_csv(io.BytesIO(data.read("raw/flights/2013-01-01.csv")[0]))
    df = df.assign(day=2, dep_delay=1000.0,
                   time_hour=df["time_hour"].str.replace("2013-01-01", "2013-01-02"))
    data.write("raw/flights/2013-01-02.csv", df.to_csv(index=False).encode())
    from spark_jobs.runtime import DeclineEpoch
    with pytest.raises(DeclineEpoch, match="validation failed"):
        run_epoch(c, spark, data_uri, "bad")
    meta = c.metadata(2)
    assert (meta.status, meta.reason, meta.declined_by) == ("aborted", "declined", "validate")
    assert read_manifest(c.storage, c.layout) == before  # nothing published
    assert [a.epoch_id for a in alerts] == [2]  # the alert path fired, once


def test_same_paths_with_new_content_in_one_session(spark, tmp_path):
    """A long-lived session (embedded runs, benchmarks, the fault suite) must not serve one
    run's cached rows to a later run over the same paths with other content: here epoch 2
    runs twice from the same restored copy of epoch 1, first over a clean day 2, then over
    a day 2 with malformed rows."""
    import shutil

    root, snap = tmp_path / "w", tmp_path / "snap"
    data = LocalStorage(root / "data")
    land(data, [D[0], D[1]], weather=False)
    c = Coordinator(LocalStorage(root / "ckpt"), "flights_daily")
    run_epoch(c, spark, f"file://{root}/data", "r1",
              data_interval={"start": D[0].isoformat(), "end": D[1].isoformat()})
    shutil.copytree(root, snap)
    run_epoch(c, spark, f"file://{root}/data", "r2")
    shutil.rmtree(root)
    shutil.copytree(snap, root)
    rep = land(data, [D[1]], malformed_rate=0.05, seed=2, weather=False, dims=False)
    c = Coordinator(LocalStorage(root / "ckpt"), "flights_daily")
    epoch, _ = run_epoch(c, spark, f"file://{root}/data", "r2")
    counts = c.completed_handles(epoch)["ingest_flights"].row_counts
    assert counts["rows_quarantined"] == sum(rep.malformed_by_file.values()) > 0
    assert_gold_matches_oracle(c, data, ROUTE, "gold_route_stats")
