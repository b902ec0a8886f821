"""One epoch end to end with Spark reading and writing s3a:// on the S3 server the tests
start (MinIO or moto), checkpoint documents through the library's S3 storage."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pandas as pd

from checkpointing import Coordinator, read_manifest
from checkpointing.storage.s3 import S3Storage
from checkpointing.verify import verify_epoch
from spark_jobs.flights.landing import land
from tests import oracle
from tests.s3server import ACCESS_KEY, SECRET_KEY

ROOT = Path(__file__).resolve().parent.parent


def test_epoch_end_to_end_on_s3a(s3_server, s3_bucket):
    data = S3Storage(s3_bucket, "data", endpoint_url=s3_server.endpoint)
    land(data, [date(2013, 1, 1), date(2013, 1, 2)], malformed_rate=0.01, seed=9)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    r = subprocess.run(
        [sys.executable, "-m", "spark_jobs.flights.run_epoch", "--storage", f"s3://{s3_bucket}/ckpt",
         "--data", f"s3://{s3_bucket}/data", "--run-id", "s3-run",
         "--endpoint-url", s3_server.endpoint],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    assert SECRET_KEY not in r.stdout + r.stderr  # no secret in any log line
    ckpt = S3Storage(s3_bucket, "ckpt", endpoint_url=s3_server.endpoint)
    c = Coordinator(ckpt, "flights_daily")
    assert c.latest_completed() == 1
    m = read_manifest(ckpt, c.layout)
    f = m.outputs["gold_carrier_stats"].files[0]
    # Executors wrote through s3a into the attempt's own prefix (works on any cluster).
    assert f.uri.startswith(f"s3://{s3_bucket}/ckpt/flights_daily/epochs/0000000001/state/"
                            "carrier_stats/attempt-0001/")
    got = pd.concat([pd.read_parquet(io.BytesIO(ckpt.read(ckpt.key_for_uri(x.uri))[0]))
                     for x in m.outputs["gold_carrier_stats"].files])
    files = {o.key: data.read(o.key)[0] for o in data.list("raw/flights/")}
    rows, _, _ = oracle.clean_flights(files)
    want = oracle.stats(rows, ["carrier"])
    got = got.sort_values("carrier").reset_index(drop=True)
    assert got["flights"].tolist() == want["flights"].tolist()
    assert got["dep_delay_sum"].sum() == want["dep_delay_sum"].sum()
    # The executors' files were hashed by S3 at upload (s3a's SHA-256 checksums), not
    # downloaded to the driver; every recorded sha256 is the file's, read back here.
    handles = c.completed_handles(1)
    assert sum(h.metrics.get("files_hashed_by_store", 0) for h in handles.values()) > 0
    report = verify_epoch(c, 1)
    # A file that is a task's state and its published output is hashed once.
    distinct = {f.uri for h in handles.values() for f in h.all_files()}
    assert report.ok and report.files_unchanged == 0, report.problems
    assert report.files_checked == len(distinct) == len(report.verified)

    # A second day: the first days' bronze partitions are referenced, not rewritten.
    land(data, [date(2013, 1, 3)], dims=False)
    r = subprocess.run(
        [sys.executable, "-m", "spark_jobs.flights.run_epoch", "--storage", f"s3://{s3_bucket}/ckpt",
         "--data", f"s3://{s3_bucket}/data", "--run-id", "s3-run-2",
         "--endpoint-url", s3_server.endpoint],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    h1 = c.completed_handles(1)["ingest_flights"]
    h2 = Coordinator(ckpt, "flights_daily").completed_handles(2)["ingest_flights"]
    old = {f.name: f.uri for f in h1.files}
    carried = [f for f in h2.files if "part=2013-01-01/" in f.name]
    assert carried and all(old[f.name] == f.uri for f in carried)
    assert h2.metrics["partitions_rewritten"] == ["2013-01-03"]
