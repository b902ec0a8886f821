"""The peer a Spark user would pick instead of checkpointed DAG runs: Spark Declarative
Pipelines (``pyspark.pipelines``, run by the ``spark-pipelines`` CLI that pyspark ships; the
Airflow Spark provider's SparkPipelinesOperator runs the same command).

The pipeline computes the same route and carrier aggregates over the same raw flight files:
a streaming table ``flights_bronze`` (new CSV files only, deduplicated on the flight's key,
its progress in the pipeline's streaming checkpoint under ``storage``) and two materialized
views over it. One ``spark-pipelines run`` per day, against the same Spark Connect server
as our epochs (both sides pay a client, neither a driver JVM; the CLI itself starts a small
JVM to launch its Python client). Recovery: a run SIGKILLed mid-way, then run again.

Ours, beside it: the same day as one epoch of ``ingest_flights`` + ``route_stats`` +
``carrier_stats`` on a Spark Connect session to that server.

    python bench/declarative_pipelines.py [--epochs 3] [--scale 1]

Prints one JSON object; ``pipeline_bench.py`` merges it as ``vs_declarative_pipelines_*``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkpointing import Coordinator, LocalStorage  # noqa: E402
from spark_jobs.flights.landing import land  # noqa: E402

ROUTE, CARRIER = ["origin", "dest"], ["carrier"]
START = date(2013, 1, 1)

TRANSFORMATIONS = '''
"""flights_sdp: the route and carrier aggregates as a Declarative Pipeline."""
from pyspark import pipelines as dp
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

spark = SparkSession.active()
SRC = spark.conf.get("flights.src")
COLUMNS = {columns!r}
KEY = ["year", "month", "day", "carrier", "flight", "origin"]


@dp.table(comment="every flight once, new files only")
def flights_bronze():
    raw = T.StructType([T.StructField(c, T.StringType()) for c in COLUMNS])
    rows = spark.readStream.schema(raw).option("header", True).csv(SRC)
    num = {{c: F.col(c).cast("double") for c in ("dep_time", "dep_delay", "arr_delay",
                                                 "distance")}}
    return rows.select(
        "year", "month", "day", "carrier", "flight", "origin", "dest",
        num["dep_time"].alias("dep_time"), num["dep_delay"].alias("dep_delay"),
        num["arr_delay"].alias("arr_delay"), num["distance"].alias("distance"),
    ).dropDuplicates(KEY)


def _stats(keys):
    return spark.read.table("flights_bronze").groupBy(*keys).agg(
        F.count("*").alias("flights"),
        F.sum(F.col("dep_time").isNull().cast("int")).alias("cancelled"),
        F.sum("dep_delay").alias("dep_delay_sum"), F.count("dep_delay").alias("dep_delay_n"),
        F.max("dep_delay").alias("dep_delay_max"),
        F.sum("arr_delay").alias("arr_delay_sum"), F.count("arr_delay").alias("arr_delay_n"),
        F.max("arr_delay").alias("arr_delay_max"),
        F.sum("distance").alias("distance_sum"))


@dp.materialized_view
def sdp_route_stats():
    return _stats(["origin", "dest"])


@dp.materialized_view
def sdp_carrier_stats():
    return _stats(["carrier"])
'''


def write_pipeline(pdir: Path, src: Path, storage: Path, database: str) -> Path:
    from spark_jobs.flights.ingest_flights import FLIGHTS

    (pdir / "transformations").mkdir(parents=True)
    (pdir / "transformations" / "flights.py").write_text(
        TRANSFORMATIONS.format(columns=list(FLIGHTS.columns)))
    spec = pdir / "spark-pipeline.yaml"
    spec.write_text(
        "name: flights_sdp\n"
        f"storage: file://{storage}\n"
        f"database: {database}\n"
        "libraries:\n  - glob:\n      include: transformations/**\n"
        "configuration:\n"
        f"  flights.src: \"{src}\"\n"
        "  spark.sql.shuffle.partitions: \"4\"\n")
    return spec


def sdp_command(spec: Path, remote: str) -> list[str]:
    import pyspark

    return [str(Path(pyspark.__file__).parent / "bin" / "spark-pipelines"), "run",
            "--spec", str(spec), "--remote", remote]


def sdp_run(spec: Path, remote: str, kill_after: float | None = None) -> float:
    """One ``spark-pipelines run``; its wall seconds. ``kill_after``: SIGKILL it then."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    t0 = time.perf_counter()
    p = subprocess.Popen(sdp_command(spec, remote), env=env, stdout=subprocess.PIPE,  # noqa: S603
                         stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         cwd=spec.parent)
    if kill_after is not None:
        try:
            p.wait(kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return time.perf_counter() - t0
    out, _ = p.communicate(timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"spark-pipelines run failed ({p.returncode}): {out[-3000:]}")
    return time.perf_counter() - t0


def sdp_tables(spark, database: str) -> dict[str, Any]:
    for t in ("sdp_route_stats", "sdp_carrier_stats"):  # rewritten by another session
        spark.catalog.refreshTable(f"{database}.{t}")
    return {"route": spark.read.table(f"{database}.sdp_route_stats").toPandas(),
            "carrier": spark.read.table(f"{database}.sdp_carrier_stats").toPandas()}


def equal_to_oracle(frames: dict[str, Any], data: LocalStorage, until: date) -> bool:
    import pandas as pd

    from bench.harness import oracle

    rows, _, _ = oracle.clean_flights(oracle.raw_files(data, until.isoformat()))
    for name, keys in (("route", ROUTE), ("carrier", CARRIER)):
        want = oracle.stats(rows, keys)
        got = frames[name][keys + oracle.METRIC_COLS].sort_values(keys).reset_index(drop=True)
        try:
            pd.testing.assert_frame_equal(got, want, check_dtype=False, check_exact=False,
                                          rtol=1e-9)
        except AssertionError as exc:
            print(f"declarative pipelines: {name} differs from the oracle: "
                  f"{str(exc).splitlines()[0]}", file=sys.stderr)
            return False
    return True


def compare(remote: str, work: Path, epochs: int, scale: int = 1,
            history_days: int = 2) -> dict[str, Any]:
    """Both sides over ``history_days`` then ``epochs`` single days; then SDP's recovery."""
    from bench.flights_epochs import STATS_EDGES, STATS_PLAN, run_plan
    from spark_jobs.runtime import spark_session

    data = LocalStorage(work / "data")
    days = [START + timedelta(days=i) for i in range(history_days + epochs + 1)]
    land(data, days, scale=scale, seed=1)
    src = work / "src"
    src.mkdir()
    database = f"sdp_{os.getpid()}_{int(time.time())}"

    def stage(d: date) -> None:
        key = f"raw/flights/{d.isoformat()}.csv"
        (src / Path(key).name).write_bytes(data.read(key)[0])

    spark = spark_session("bench.sdp", remote=remote)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    spec = write_pipeline(work / "pipeline", src, work / "sdp-storage", database)
    coord = Coordinator(LocalStorage(work / "ckpt"), "flights_stats")
    plan = STATS_PLAN
    data_uri = f"file://{work}/data"
    try:
        for d in days[:history_days]:
            stage(d)
        sdp_run(spec, remote)  # history, one first run; ours, one first epoch
        run_plan(coord, spark, data_uri, STATS_EDGES, plan, "history", history_days + 1)
        theirs, ours = [], []
        for i, d in enumerate(days[history_days:history_days + epochs]):
            stage(d)
            theirs.append(sdp_run(spec, remote))
            _, secs = run_plan(coord, spark, data_uri, STATS_EDGES, plan, f"day-{i}",
                               history_days + i + 2)
            ours.append(secs)
        equal = equal_to_oracle(sdp_tables(spark, database), data,
                                days[history_days + epochs])
        # Recovery: the next day's run SIGKILLed half-way through a clean run's time, then
        # the same command again; its output must still count each flight once.
        stage(days[-1])
        sdp_run(spec, remote, kill_after=statistics.median(theirs) / 2)
        recovery = sdp_run(spec, remote)
        equal_after_kill = equal_to_oracle(sdp_tables(spark, database), data,
                                           days[-1] + timedelta(days=1))
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
        spark.stop()
    return {"epochs": epochs, "scale": scale,
            "ours_epoch_seconds": round(statistics.median(ours), 2),
            "theirs_epoch_seconds": round(statistics.median(theirs), 2),
            "ours_all": [round(x, 2) for x in ours], "theirs_all": [round(x, 2) for x in theirs],
            "theirs_recovery_seconds": round(recovery, 2),
            "results_equal": equal and equal_after_kill}


def measure(epochs: int, scale: int = 1, remote: str | None = None) -> dict[str, Any]:
    """:func:`compare` on ``remote``, or on a Spark Connect server started for it."""
    from bench.harness.airflow_standalone import free_port
    from spark_jobs.runtime.connect_server import ConnectServer

    work = Path(tempfile.mkdtemp(prefix="ckpt-sdp-"))
    server = None
    try:
        if remote is None:
            server = ConnectServer(port=free_port(), log_path=work / "connect.log",
                                   warehouse=work / "warehouse").start()
            remote = server.url
        res = compare(remote, work, epochs, scale)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    res["vs_declarative_pipelines_epoch_ratio"] = round(
        res["ours_epoch_seconds"] / res["theirs_epoch_seconds"], 2)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="declarative_pipelines",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--remote", help="an existing Spark Connect server (default: start one)")
    a = ap.parse_args(argv)
    res = measure(a.epochs, a.scale, a.remote)
    print(json.dumps(res, indent=2))
    return 0 if res["results_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
