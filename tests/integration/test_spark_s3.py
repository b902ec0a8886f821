"""One epoch end to end with Spark reading and writing s3a:// on the S3 server the tests
start (MinIO or moto), checkpoint documents through the library's S3 storage."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from bench.harness import oracle
from bench.harness.s3server import ACCESS_KEY, SECRET_KEY
from checkpointing import Coordinator, read_manifest
from checkpointing.state.verify import verify_epoch
from checkpointing.storage.s3 import S3Storage
from spark_jobs.flights.landing import land
from tests.support.helpers import FLIGHTS
from tests.support.tables_readers import rows_deltalake, rows_duckdb

ROOT = Path(__file__).resolve().parents[2]


def _frame(rows: list[tuple], key: str) -> pd.DataFrame:
    """A reader's rows (columns in name order, as tests.support.tables_readers returns them)."""
    cols = sorted(["bucket", "cancelled", "arr_delay_max", "arr_delay_n", "arr_delay_sum",
                   "avg_arr_delay", "avg_dep_delay", "avg_distance", "dep_delay_max",
                   "dep_delay_n", "dep_delay_sum", "distance_sum", "flights", key])
    return pd.DataFrame(rows, columns=cols).sort_values(key).reset_index(drop=True)


def test_epoch_end_to_end_on_s3a(s3_server, s3_bucket, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)  # what DuckDB's S3 secret is given
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    data = S3Storage(s3_bucket, "data", endpoint_url=s3_server.endpoint)
    land(data, [date(2013, 1, 1), date(2013, 1, 2)], malformed_rate=0.01, seed=9)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "SPARK_LOCAL_IP": "127.0.0.1"}

    def run_epoch(run_id: str) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [sys.executable, "-m", "spark_jobs.runtime.run_epoch", *FLIGHTS,
             "--storage", f"s3://{s3_bucket}/ckpt", "--data", f"s3://{s3_bucket}/data",
             "--run-id", run_id, "--endpoint-url", s3_server.endpoint],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-4000:]
        return r

    r = run_epoch("s3-run")
    assert SECRET_KEY not in r.stdout + r.stderr  # no secret in any log line
    ckpt = S3Storage(s3_bucket, "ckpt", endpoint_url=s3_server.endpoint)
    c = Coordinator(ckpt, "flights_daily")
    assert c.latest_completed() == 1
    m = read_manifest(ckpt, c.layout)
    f = c.completed_handles(1)["carrier_stats"].files[0]
    # Executors wrote through s3a into the attempt's own prefix (works on any cluster).
    assert f.uri.startswith(f"s3://{s3_bucket}/ckpt/flights_daily/epochs/0000000001/state/"
                            "carrier_stats/attempt-0001/")
    # The gold output is a Delta table on the S3 server, read by two engines this project
    # did not write (delta-rs and DuckDB's delta extension): both equal the oracle.
    table = m.outputs["gold_carrier_stats"].meta["table"]["location"]
    assert table == f"s3://{s3_bucket}/data/tables/gold_carrier_stats"
    files = {o.key: data.read(o.key)[0] for o in data.list("raw/flights/")}
    rows, _, _ = oracle.clean_flights(files)
    want = oracle.stats(rows, ["carrier"])
    for reader in (rows_deltalake, rows_duckdb):
        got = _frame(reader(table, s3_server.endpoint), "carrier")
        assert got["flights"].tolist() == want["flights"].tolist(), reader
        assert got["dep_delay_sum"].sum() == pytest.approx(want["dep_delay_sum"].sum())
    # The executors' files were hashed by S3 at upload (s3a's SHA-256 checksums), not
    # downloaded to the driver; every recorded sha256 is the file's, read back here.
    handles = c.completed_handles(1)
    assert sum(h.metrics.get("files_hashed_by_store", 0) for h in handles.values()) > 0
    report = verify_epoch(c, 1)
    # A file that is a task's state and its published output is hashed once.
    distinct = {f.uri for h in handles.values() for f in h.checkpoint_files()}
    assert report.ok and report.files_unchanged == 0, report.problems
    assert report.files_checked == len(distinct) == len(report.verified)

    # A second day: the first days' bronze partitions are referenced, not rewritten.
    land(data, [date(2013, 1, 3)], dims=False)
    run_epoch("s3-run-2")
    h1 = c.completed_handles(1)["ingest_flights"]
    h2 = Coordinator(ckpt, "flights_daily").completed_handles(2)["ingest_flights"]
    old = {f.name: f.uri for f in h1.files}
    carried = [f for f in h2.files if "part=2013-01-01/" in f.name]
    assert carried and all(old[f.name] == f.uri for f in carried)
    assert h2.metrics["partitions_rewritten"] == ["2013-01-03"]
    # One table version per completed epoch (version 0 created the table).
    from checkpointing.tables.delta import open_table

    dt = open_table(table, s3_server.endpoint)
    assert {int(h["version"]): h.get("ckpt.epoch_id") for h in dt.history()} == {
        0: None, 1: "1", 2: "2"}
    files = {o.key: data.read(o.key)[0] for o in data.list("raw/flights/")}
    want = oracle.stats(oracle.clean_flights(files)[0], ["carrier"])
    got = _frame(rows_deltalake(table, s3_server.endpoint), "carrier")
    assert got["flights"].tolist() == want["flights"].tolist()
    # Time travel: the version of epoch 1 still holds the first two days only.
    v1 = read_manifest(ckpt, c.layout).history[0]["tables"]["gold_carrier_stats"]
    got1 = _frame(rows_deltalake(table, s3_server.endpoint, version=v1), "carrier")
    assert got1["flights"].sum() == len(rows)
