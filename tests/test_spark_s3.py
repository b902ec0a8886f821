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
from spark_jobs.landing import land
from tests import oracle
from tests.s3server import ACCESS_KEY, SECRET_KEY

ROOT = Path(__file__).resolve().parent.parent


def test_epoch_end_to_end_on_s3a(s3_server, s3_bucket):
    data = S3Storage(s3_bucket, "data", endpoint_url=s3_server.endpoint)
    land(data, [date(2013, 1, 1), date(2013, 1, 2)], malformed_rate=0.01, seed=9)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    r = subprocess.run(
        [sys.executable, "-m", "spark_jobs.run_epoch", "--storage", f"s3://{s3_bucket}/ckpt",
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
    assert f.uri.startswith(f"s3://{s3_bucket}/ckpt/flights_daily/shared/")
    got = pd.concat([pd.read_parquet(io.BytesIO(ckpt.read(ckpt.key_for_uri(x.uri))[0]))
                     for x in m.outputs["gold_carrier_stats"].files])
    files = {o.key: data.read(o.key)[0] for o in data.list("raw/flights/")}
    rows, _, _ = oracle.clean_flights(files)
    want = oracle.stats(rows, ["carrier"])
    got = got.sort_values("carrier").reset_index(drop=True)
    assert got["flights"].tolist() == want["flights"].tolist()
    assert got["dep_delay_sum"].sum() == want["dep_delay_sum"].sum()
