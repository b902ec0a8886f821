"""tpch_daily at scale: does an epoch's cost follow the day's change?

On one Spark Connect server (``--driver-memory``, local storage unless ``--s3``), at scale
factor ``--scale``:

1. **Initial epoch**: the bulk history epoch with checkpoints, against the same queries as
   plain Spark over the same files right after it, with no state and no checkpoint
   (``tpch_initial_epoch_overhead_ratio``): ``--initial-repeats`` pairs, each history epoch
   a pipeline of its own on data landed afresh, the medians compared. One pair misleads at
   SF 1: the same history epoch took 56.8 s on a server that had run nothing that size
   and 36.7 s the second time (plain Spark 30.2 s, then 28.0 s), the JVM's JIT and
   Spark's generated code warming up.
2. **Daily epochs** after the full history (``--days`` of them, one deletion day in
   ``--delete-every``): the median epoch (``tpch_daily_epoch_seconds``), where its time goes
   (restore, job, snapshot write, acknowledgement and commit), the bytes written over the
   bytes that landed (``tpch_bytes_written_over_changed``), the state files after them
   (``tpch_state_files_after_epochs``) and the customer-state compactions among them.
3. The same daily epochs after **10 % of the history** (a second pipeline on its own
   data root): ``tpch_daily_epoch_growth`` = full-history median / 10 %-history median.
   Its history epoch runs first (warming the server up for the full history epoch and for
   plain Spark alike) and the pipelines' daily epochs alternate, so neither meets a colder
   server (at SF 1, run one after the other, the growth read 1.35; alternating, 1.07).
4. **Recovery**: a daily epoch whose tasks are killed after the ingest acknowledged is run
   again (the retry restores from the last epoch), against recomputing its outputs from all
   history with plain Spark (``tpch_recovery_speedup`` = recompute / retry).
5. One more daily epoch as a task process runs it (``python -m
   spark_jobs.runtime.run_epoch``): its peak memory (``tpch_task_process_peak_mb``).
6. **Structured Streaming** over the same files on the first ``--streaming-days`` days
   (``bench/tpch_streaming.py``; local storage only): ``tpch_vs_structured_streaming_daily_ratio``.
7. Peak memory (VmHWM) of the Connect server's process group and of this client process.

``--s3`` puts data and checkpoints in a bucket of a MinIO started here, and runs the same
epochs on local storage as the control (``tpch_s3_over_local_daily_ratio``).

Every epoch's outputs after the last are checked against DuckDB (bench/harness/tpch_oracle.py).

    python bench/tpch_bench.py --scale 1 --days 20
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness.local import local_root  # noqa: E402
from checkpointing import Coordinator, open_storage  # noqa: E402
from spark_jobs.runtime import run_task, spark_uri  # noqa: E402
from spark_jobs.tpch import jobs  # noqa: E402
from spark_jobs.tpch.landing import DEFAULT_CACHE, LAST_ORDER_DAY, generate, land  # noqa: E402
from spark_jobs.tpch.pipeline import EDGES, JOBS, OUTPUTS, PLAN, run_epoch  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FIRST_DAY = date(1992, 1, 1)


def server_heap(scale: float) -> str:
    """The Connect server's heap by the sizing rule of docs/guides/tpch.md: about 0.6 GB
    per scale factor, at least 2 GB (6 GB at SF 10, whose server then peaked at 7.0 GB in
    all; with 8 GB it peaked at 9.3 GB, over the 8 GB target)."""
    return f"{max(2048, round(614.4 * scale))}m"


def _interval(until: date) -> dict[str, str]:
    return {"start": (until - timedelta(days=1)).isoformat(), "end": until.isoformat()}


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def vm_hwm_mb(pid: int) -> float | None:
    """Peak resident memory of a process (Linux VmHWM), MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------------- plain Spark
def plain_outputs(spark: Any, data_uri: str, until: date, out: Path) -> float:
    """The published outputs computed straight from the landed files before ``until``, no
    state and no checkpoint: seconds. The control of the initial-epoch and recovery ratios."""
    from pyspark.sql import functions as F

    data = open_storage(data_uri)

    def keys(prefix: str) -> list[str]:
        return [spark_uri(data.uri(o.key)) for o in data.list(prefix)
                if o.key.endswith(".parquet") and (
                    "history-" in o.key or o.key.rsplit("/", 1)[-1][:10] < until.isoformat())]

    t0 = time.perf_counter()
    orders = spark.read.parquet(*keys("raw/orders/")).dropDuplicates(["o_orderkey"])
    deletes = keys("raw/deletes/")
    if deletes:
        orders = orders.join(spark.read.parquet(*deletes).select("o_orderkey"), "o_orderkey",
                             "left_anti")
    lines = spark.read.parquet(*keys("raw/lineitem/")).dropDuplicates(
        ["l_orderkey", "l_linenumber"])
    customer = spark.read.parquet(spark_uri(data.uri("dim/customer.parquet")))
    supplier = spark.read.parquet(spark_uri(data.uri("dim/supplier.parquet")))
    nation = spark.read.parquet(spark_uri(data.uri("dim/nation.parquet")))
    region = spark.read.parquet(spark_uri(data.uri("dim/region.parquet")))
    j = (lines.join(orders, lines.l_orderkey == orders.o_orderkey)
         .join(F.broadcast(customer), F.col("o_custkey") == F.col("c_custkey"))
         .join(F.broadcast(supplier), F.col("l_suppkey") == F.col("s_suppkey")))
    j = j.withColumn("disc_price", F.col("l_extendedprice") * (1 - F.col("l_discount")))
    q1 = (j.where(F.col("l_shipdate") <= F.lit(jobs.Q1_SHIPDATE_MAX).cast("date"))
          .groupBy("l_returnflag", "l_linestatus")
          .agg(F.sum("l_quantity"), F.sum("l_extendedprice"), F.sum("disc_price"),
               F.sum(F.col("disc_price") * (1 + F.col("l_tax"))), F.count("*")))
    q5 = (j.where(F.col("s_nationkey") == F.col("c_nationkey"))
          .groupBy("c_nationkey", "o_orderdate").agg(F.sum("disc_price").alias("revenue"))
          .join(F.broadcast(nation), F.col("c_nationkey") == F.col("n_nationkey"))
          .join(F.broadcast(region), F.col("n_regionkey") == F.col("r_regionkey")))
    top = (j.groupBy("o_custkey").agg(F.sum("disc_price").alias("revenue"))
           .orderBy(F.desc("revenue"), "o_custkey").limit(jobs.TOP_N))
    for name, df in (("q1", q1), ("q5", q5), ("top", top)):
        df.write.mode("overwrite").parquet(str(out / name))
    return time.perf_counter() - t0


def initial_pairs(full: dict[str, Any], root: str, a: Any, until: date, spark: Any,
                  work: Path) -> dict[str, Any]:
    """The history epoch against plain Spark over the same files right after it, in
    ``a.initial_repeats`` pairs: the first pair is ``full``'s (the pipeline whose daily
    epochs follow), each other one a pipeline of its own on data landed afresh (landing not
    timed) and removed after it. The keys compare the medians."""
    epochs = [full["initial_seconds"]]
    plain = [plain_outputs(spark, full["data_uri"], until, work / "plain-1")]
    for r in range(2, a.initial_repeats + 1):
        rep = pipeline(root, f"full-{r}", a.scale, until, 0, 0, 0, spark, a.cache)
        epochs.append(rep["initial_seconds"])
        plain.append(plain_outputs(spark, rep["data_uri"], until, work / f"plain-{r}"))
        if root.startswith("file:"):  # a bucket's go with the bench's MinIO
            for uri in (rep["data_uri"], f"{root.rstrip('/')}/ckpt-full-{r}"):
                shutil.rmtree(local_root(open_storage(uri)), ignore_errors=True)
    e, p = statistics.median(epochs), statistics.median(plain)
    return {"tpch_initial_epoch_seconds": round(e, 1),
            "tpch_initial_plain_spark_seconds": round(p, 1),
            "tpch_initial_epoch_overhead_ratio": round(e / p, 2),
            "tpch_initial_epoch_seconds_runs": [round(x, 1) for x in epochs],
            "tpch_initial_plain_spark_seconds_runs": [round(x, 1) for x in plain]}


# ---------------------------------------------------------------------------- epochs
def epoch_split(c: Coordinator, epoch: int, handles: dict[str, Any]
                ) -> dict[str, Any]:
    """Where an epoch's time went, summed over its tasks (ms): restore (the handles), the
    Spark writes of state and outputs (where the lazily built computation runs, with its
    reads), the job's other work (its own Spark actions, listing input, building the
    snapshot), and the rest (acknowledgements, the commit with its table commits, the
    driver)."""
    meta = c.metadata(epoch)
    restore = sum(h.timings.get("restore_ms", 0) for h in handles.values())
    job = sum(h.timings.get("run_ms", 0) for h in handles.values())
    sync = sum(h.timings.get("sync_ms", 0) for h in handles.values())
    from checkpointing.protocol.documents import parse_iso

    total = (parse_iso(meta.decided_at) - parse_iso(c.barrier(epoch).created_at)) * 1000
    return {"total_ms": round(total), "restore_ms": round(restore),
            "spark_writes_ms": round(sync), "job_other_ms": round(job - sync),
            "ack_commit_and_driver_ms": round(total - restore - job),
            # Per task, the job's own time: which task's cost follows the history.
            "task_run_ms": {t: round(h.timings.get("run_ms", 0))
                            for t, h in sorted(handles.items())}}


def epoch_bytes(handles: dict[str, Any]) -> int:
    return sum(h.bytes_written for h in handles.values())


def day_bytes(data: Any, day: date) -> int:
    """Bytes that landed for ``day``: its orders, line items and deletions."""
    from checkpointing.errors import NotFound

    total = 0
    for key in (f"raw/orders/{day}.parquet", f"raw/lineitem/{day}.parquet",
                f"raw/deletes/{day}.parquet"):
        try:
            total += data.head(key).size
        except NotFound:
            pass
    return total


def run_day(p: dict[str, Any], spark: Any) -> dict[str, Any]:
    """The next daily epoch of pipeline ``p`` (see ``pipeline``), appended to its
    ``daily``."""
    c, data_uri = p["coordinator"], p["data_uri"]
    day = p["history_until"] + timedelta(days=len(p["daily"]))
    t0 = time.perf_counter()
    epoch, meta = run_epoch(c, spark, data_uri, f"day-{day}",
                            data_interval=_interval(day + timedelta(days=1)))
    secs = time.perf_counter() - t0
    assert meta is not None and meta.completed, (epoch, meta)
    handles = c.completed_handles(epoch)
    top = handles["top_customers"]
    out = {"epoch": epoch, "day": day.isoformat(), "seconds": round(secs, 2),
           "orders_deleted": handles["ingest"].row_counts.get("orders_deleted", 0),
           "bytes_written": epoch_bytes(handles),
           "bytes_landed": day_bytes(p["data"], day),
           "compacted": bool(top.metrics.get("compacted")),
           "compaction_ms": top.metrics.get("compaction_ms"),
           **epoch_split(c, epoch, handles)}
    p["daily"].append(out)
    return out


def _task_medians(daily: list[dict[str, Any]]) -> dict[str, float]:
    """Each task's median run time over the days without a deletion or a compaction."""
    days = [d for d in daily if not d["compacted"] and not d["orders_deleted"]]
    return {t: statistics.median(d["task_run_ms"][t] for d in days)
            for t in (days[0]["task_run_ms"] if days else {})}


#: A pipeline's live objects, left out of the results.
_LIVE = ("coordinator", "data_uri", "data", "landed", "history_until")


def state_files(c: Coordinator, epoch: int) -> dict[str, int]:
    return {t: len(h.files) for t, h in c.completed_handles(epoch).items()}


def pipeline(root: str, name: str, scale: float, history_until: date, days: int,
             delete_every: int, deletes: int, spark: Any, cache: Path) -> dict[str, Any]:
    """Land the data under ``root``/data-<name> (a directory URI or s3://bucket/prefix)
    and run the history epoch with checkpoints under ``root``/ckpt-<name>; its daily
    epochs are run by ``run_day``."""
    data_uri = f"{root.rstrip('/')}/data-{name}"
    t0 = time.perf_counter()
    # The daily days, then one for the recovery and one for the task-process epoch.
    data = open_storage(data_uri)
    landed = land(data, scale, history_until, days + 2,
                  delete_every=delete_every, deletes=deletes, cache=cache)
    landing_s = time.perf_counter() - t0
    c = Coordinator(open_storage(f"{root.rstrip('/')}/ckpt-{name}"), f"tpch_{name}")
    t0 = time.perf_counter()
    epoch, meta = run_epoch(c, spark, data_uri, "history",
                            data_interval=_interval(history_until))
    initial_s = time.perf_counter() - t0
    handles = c.completed_handles(epoch)
    return {"coordinator": c, "data_uri": data_uri, "data": data, "landed": landed,
            "history_until": history_until,
            "landing_seconds": round(landing_s, 1), "initial_seconds": round(initial_s, 1),
            "initial_split": epoch_split(c, epoch, handles),
            "initial_bytes": epoch_bytes(handles), "daily": []}


def recovery(c: Coordinator, spark: Any, data_uri: str, day: date, work: Path
             ) -> dict[str, Any]:
    """A daily epoch killed after its ingest acknowledged (the downstream tasks die), run
    again: the retry's seconds, against plain Spark recomputing the outputs from all
    history."""
    until = day + timedelta(days=1)
    b = c.begin_epoch(PLAN, f"day-{day}", data_interval=_interval(until))
    run_task(JOBS["ingest"], c, b.epoch_id, "ingest", 1, spark, data_uri)
    t0 = time.perf_counter()
    epoch, meta = run_epoch(c, spark, data_uri, f"day-{day}",
                            data_interval=_interval(until))
    retry = time.perf_counter() - t0
    assert meta.completed and epoch == b.epoch_id
    recompute = plain_outputs(spark, data_uri, until, work / "recompute")
    return {"retry_seconds": round(retry, 2), "recompute_seconds": round(recompute, 2),
            "tpch_recovery_speedup": round(recompute / retry, 1)}


def task_process_epoch(c: Coordinator, remote: str, data_uri: str, day: date
                       ) -> dict[str, Any]:
    """One daily epoch run as a task process runs it (``python -m
    spark_jobs.runtime.run_epoch``, a fresh interpreter, the pipeline's four tasks against
    the same Connect server): its seconds and peak resident memory (VmHWM, polled)."""
    import subprocess

    cmd = [sys.executable, "-m", "spark_jobs.runtime.run_epoch",
           "--jobs", "spark_jobs.tpch.pipeline:PIPELINE", "--storage", c.storage.uri(""),
           "--data", data_uri, "--pipeline", c.pipeline_id, "--run-id", f"day-{day}",
           "--until", (day + timedelta(days=1)).isoformat(), "--remote", remote]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, vm_hwm_mb(proc.pid) or 0)
        time.sleep(0.1)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"run_epoch exited {proc.returncode}: {err.strip()[-500:]}")
    return {"day": day.isoformat(), "seconds": round(time.perf_counter() - t0, 2),
            "peak_mb": round(peak), "result": out.strip()}


def start_s3(work: Path) -> dict[str, Any]:
    """A MinIO on 127.0.0.1 (the tests' harness), its credentials in this process's
    environment (the Connect server inherits them), and a bucket: ``root`` is its URI."""
    import os

    from bench.harness.s3server import ACCESS_KEY, SECRET_KEY, start_s3_server

    server = start_s3_server("minio")
    os.environ.update({"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                       "AWS_ENDPOINT_URL": server.endpoint})
    server.client().create_bucket(Bucket="tpch-bench")
    return {"server": server, "endpoint": server.endpoint, "root": "s3://tpch-bench/run"}


def check_oracle(c: Coordinator, generated: Path, landed: Any, until: date) -> bool:
    from bench.harness.tpch_oracle import check_published as check

    deleted = sorted(k for d, ks in landed.deletes.items() if d < until.isoformat()
                     for k in ks)
    check(c, generated, until.isoformat(), deleted)
    return True


def main(argv: list[str] | None = None) -> int:
    from bench.harness.steps import Progress, work_dir
    from bench.pipeline_bench import record
    from spark_jobs.runtime.connect_server import ConnectServer
    from spark_jobs.runtime.processes import free_port, process_groups

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--days", type=int, default=20, help="daily epochs after each history")
    ap.add_argument("--delete-every", type=int, default=7)
    ap.add_argument("--deletes", type=int, default=100, help="orders deleted per deletion day")
    ap.add_argument("--history-until", default=None,
                    help="full history's end (default: --days + 3 days before 1998-08-02)")
    ap.add_argument("--driver-memory", default=None,
                    help="the Connect server's heap (default: 0.6 GB per scale factor, at "
                         "least 2 GB: the sizing rule)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--work", type=Path, default=None,
                    help="an empty or new directory, kept after the run (default: a "
                         "temporary one, removed)")
    ap.add_argument("--skip-small-history", action="store_true")
    ap.add_argument("--initial-repeats", type=int, default=3,
                    help="history epochs, each followed by plain Spark (medians compared)")
    ap.add_argument("--streaming-days", type=int, default=5,
                    help="days compared with Structured Streaming (0: none; local only)")
    ap.add_argument("--s3", action="store_true",
                    help="data and checkpoints on a MinIO started here (bench/harness/s3server.py)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results (default bench/results/latest.json; with --s3, "
                         "bench/results/tpch_sf<S>_s3.json)")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    a = ap.parse_args(argv)
    if a.work is not None and a.work.is_dir() and any(a.work.iterdir()):
        # An earlier run's epochs there would be resumed, not run: its history epoch would
        # be timed at 0 s and its state would carry into this run's days.
        ap.error(f"--work {a.work} is not empty: name an empty or new directory")
    a.driver_memory = a.driver_memory or server_heap(a.scale)
    if a.out is None:  # a MinIO run's keys are the local run's: kept apart from them
        a.out = RESULTS / (f"tpch_sf{a.scale:g}_s3.json" if a.s3 else "latest.json")

    full_until = date.fromisoformat(a.history_until) if a.history_until else \
        LAST_ORDER_DAY - timedelta(days=a.days + 3)
    small_until = FIRST_DAY + (full_until - FIRST_DAY) / 10
    work = work_dir(a.work, "tpch-bench-")
    progress = Progress("tpch bench")
    t0 = time.perf_counter()

    generated = generate(a.scale, a.cache)
    generate_s = time.perf_counter() - t0
    progress("data generated")
    s3 = start_s3(work) if a.s3 else None
    root = s3["root"] if s3 else work.as_uri()
    server = ConnectServer(port=free_port(), driver_memory=a.driver_memory,
                           s3_endpoint=s3["endpoint"] if s3 else None,
                           log_path=work / "connect.log").start()
    spark = None
    try:
        spark = server.session("tpch-bench")
        # The controls' histories first (the small one warms the server up: the JIT and
        # generated code the full history epoch and plain Spark then both find), then every
        # pipeline's daily epochs in turn: each day's epochs meet the same server.
        local = small = None
        if not a.skip_small_history:
            small = pipeline(root, "small", a.scale, small_until, a.days, a.delete_every,
                             a.deletes, spark, a.cache)
            progress("small history")
        if a.s3:  # the same epochs on local storage, through the same server
            local = pipeline(work.as_uri(), "local", a.scale, full_until, a.days,
                             a.delete_every, a.deletes, spark, a.cache)
        full = pipeline(root, "full", a.scale, full_until, a.days, a.delete_every, a.deletes,
                        spark, a.cache)
        progress("full history")
        initial = initial_pairs(full, root, a, full_until, spark, work)
        progress("history epochs and plain Spark")
        for _ in range(a.days):
            for p in (full, local, small):
                if p is not None:
                    run_day(p, spark)
        progress("daily epochs")
        c, data_uri = full["coordinator"], full["data_uri"]
        last = date.fromisoformat(full["daily"][-1]["day"]) + timedelta(days=1)
        equal = check_oracle(c, generated, full["landed"], last)
        progress("results compared with DuckDB")
        rec = recovery(c, spark, data_uri, last, work)
        task = task_process_epoch(c, server.url, data_uri, last + timedelta(days=1))
        progress("recovery and the task-process epoch")
        files = state_files(c, c.epoch_ids()[-1])
        streaming = None
        if a.streaming_days and not a.s3:
            from bench.tpch_streaming import compare

            streaming = compare(spark, local_root(open_storage(data_uri)), work / "ss",
                                generated, full["daily"], jobs.TOP_N, jobs.Q1_SHIPDATE_MAX,
                                a.streaming_days)
        # The server's own process group (its launcher and JVM), not any other server's.
        server_mb = max((vm_hwm_mb(p) or 0) for p, group in process_groups()
                        if group == server.proc.pid)
    finally:
        if spark is not None:
            # Before the server goes: a client left open retries its release for minutes
            # at exit (RETRIES_EXCEEDED), as a run of this bench measured (9 min).
            spark.stop()
        server.stop()
        if s3:
            s3["server"].stop()
    client_mb = vm_hwm_mb(__import__("os").getpid())

    daily = full["daily"]
    plain_days = [d for d in daily if not d["compacted"]]
    med = statistics.median(d["seconds"] for d in daily)
    ratio_bytes = statistics.median(d["bytes_written"] / d["bytes_landed"] for d in daily
                                    if d["bytes_landed"])
    compactions = [d["compaction_ms"] for d in daily if d["compacted"]]
    # Deletion days against the other days without a compaction (a compaction's cost is
    # the customer state's, measured apart).
    del_days = [d["seconds"] for d in daily if d["orders_deleted"]]
    normal = [d["seconds"] for d in plain_days if not d["orders_deleted"]]
    summary = {
        "tpch_scale_factor": a.scale,
        **initial,
        "tpch_daily_epoch_seconds": med,
        "tpch_daily_epoch_seconds_small_history": (statistics.median(
            d["seconds"] for d in small["daily"]) if small else None),
        "tpch_bytes_written_over_changed": round(ratio_bytes, 2),
        f"tpch_state_files_after_{len(daily)}_epochs": sum(files.values()),
        "tpch_deletion_day_ratio": (round(statistics.median(del_days) / statistics.median(
            normal), 2) if del_days and normal else None),
        "tpch_compactions": len(compactions),
        "tpch_compaction_ms_median": statistics.median(compactions) if compactions else None,
        **rec,
        **({k: v for k, v in streaming.items() if k.startswith("tpch_")} if streaming else {}),
        "tpch_connect_server_peak_mb": round(server_mb),
        "tpch_task_process_peak_mb": task["peak_mb"],
        "tpch_client_peak_mb": round(client_mb or 0),
        "tpch_results_equal_duckdb": equal,
    }
    if local:
        local_med = statistics.median(d["seconds"] for d in local["daily"])
        summary["tpch_daily_epoch_seconds_local"] = local_med
        summary["tpch_s3_over_local_daily_ratio"] = round(med / local_med, 2)
        summary["tpch_s3_over_local_initial_ratio"] = round(
            full["initial_seconds"] / local["initial_seconds"], 2)
    if small:
        summary["tpch_daily_epoch_growth"] = round(
            med / summary["tpch_daily_epoch_seconds_small_history"], 2)
    details = {"generate_seconds": round(generate_s, 1), "full_history_until": str(full_until),
               "small_history_until": str(small_until), "landing_seconds":
               full["landing_seconds"], "initial_split": full["initial_split"],
               "initial_bytes_written": full["initial_bytes"], "daily": daily,
               "daily_without_compaction_median_s": statistics.median(
                   d["seconds"] for d in plain_days) if plain_days else None,
               "daily_split_median": {k: statistics.median(d[k] for d in daily) for k in (
                   "restore_ms", "spark_writes_ms", "job_other_ms",
                   "ack_commit_and_driver_ms")},
               "task_run_ms_median": {label: _task_medians(run["daily"]) for label, run in (
                   ("full", full), ("small", small)) if run},
               "state_files_by_task": files, "task_process_epoch": task,
               "structured_streaming": streaming, "storage": "s3 (MinIO)" if a.s3 else
               "local",
               **{label: {k: v for k, v in (run or {}).items()
                          if k not in _LIVE}
                  for label, run in (("small", small), ("local", local))},
               "outputs": list(OUTPUTS), "edges": EDGES}
    record(a.out, a.history, f"tpch_sf{a.scale:g}{'_s3' if a.s3 else ''}", summary, details)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
