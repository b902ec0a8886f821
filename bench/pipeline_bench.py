"""Pipeline benchmarks (`make bench`): does checkpointing pay? Prints a table and writes
bench/results/latest.json; appends the run (git commit, scale, machine) to
bench/results/history.jsonl. Keys and how each is measured: bench/README.md.

Usage: python bench/pipeline_bench.py [--quick] [--scale N] [--repeats R]

Everything runs in one process with one local SparkSession (local[2]) on local storage, so
that ratios compare like with like in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.flights_epochs import (  # noqa: E402
    STATS_EDGES,
    STATS_PLAN,
    day,
    interval_until,
    run_plan,
)
from bench.harness.local import local_root  # noqa: E402
from checkpointing import (  # noqa: E402
    Coordinator,
    FileRef,
    LocalStorage,
    OutputRef,
    SnapshotWriter,
    StateHandle,
    open_storage,
)
from checkpointing.config import CheckpointConfig  # noqa: E402
from checkpointing.protocol.barrier import Barrier  # noqa: E402
from checkpointing.protocol.documents import now_iso  # noqa: E402
from checkpointing.protocol.layout import Layout  # noqa: E402
from checkpointing.state.task_storage import TaskStorage  # noqa: E402
from spark_jobs.flights.landing import land  # noqa: E402
from spark_jobs.flights.pipeline import EDGES, JOBS, PLAN  # noqa: E402
from spark_jobs.runtime import JobRun, run_task  # noqa: E402
from spark_jobs.runtime.attempt_cache import attempt_caches  # noqa: E402
from spark_jobs.runtime.run_context import NoOperationLog  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ROUTE, CARRIER = ["origin", "dest"], ["carrier"]
METRICS = ["flights", "cancelled", "dep_delay_sum", "dep_delay_n", "dep_delay_max",
           "arr_delay_sum", "arr_delay_n", "arr_delay_max", "distance_sum"]


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- recovery
def recovery(spark, work: Path, data_uri: str, d: int, repeats: int,
             recompute_repeats: int) -> dict[str, Any]:
    """History: one epoch over days 1..D from scratch (what a plain retry of a
    non-incremental pipeline recomputes), ``recompute_repeats`` times on fresh storage for
    a median. Then epoch D+1 whose last task fails after its snapshot; recovery = its
    retry, restoring from the last completed epoch. Repeated on fresh epochs (same parent)
    for a median."""
    ckpt = work / f"ckpt-d{d}"
    coord = Coordinator(LocalStorage(ckpt), "flights_daily")
    hist_id, first = run_plan(coord, spark, data_uri, EDGES, PLAN, f"history-{d}", d + 1)
    recompute_all = [first]
    for r in range(1, recompute_repeats):
        again = work / f"ckpt-d{d}-again{r}"
        recompute_all.append(run_plan(Coordinator(LocalStorage(again), "flights_daily"), spark,
                                      data_uri, EDGES, PLAN, f"history-{d}", d + 1)[1])
        shutil.rmtree(again, ignore_errors=True)
    recompute_s = statistics.median(recompute_all)
    last = list(EDGES)[-1]
    restore_s, bytes_info = [], None
    for r in range(repeats):
        eid, _ = run_plan(coord, spark, data_uri, EDGES, PLAN, f"day-{d + 1}-{r}", d + 2,
                          fail=last, lineage=f"rep{r}", parent_epoch_id=hist_id)
        t0 = time.perf_counter()
        run_task(JOBS[last], coord, eid, last, 2, spark, data_uri)
        restore_s.append(time.perf_counter() - t0)
        meta = coord.complete(eid)
        assert meta.completed
        if bytes_info is None:
            bytes_info = snapshot_bytes(coord, hist_id, eid)
    # A normal daily epoch on top of D days of state (epoch_growth_360_over_30): the same
    # next day, on lineages of their own, from the history epoch.
    normal_s = [run_plan(coord, spark, data_uri, EDGES, PLAN, f"normal-{d + 1}-{r}", d + 2,
                         lineage=f"normal{r}", parent_epoch_id=hist_id)[1]
                for r in range(repeats)]
    return {"days": d, "recompute_seconds": round(recompute_s, 2),
            "normal_epoch_seconds": round(statistics.median(normal_s), 3),
            "normal_epoch_seconds_all": [round(x, 3) for x in normal_s],
            "recompute_seconds_all": [round(x, 2) for x in recompute_all],
            "restore_seconds": round(statistics.median(restore_s), 3),
            "restore_seconds_all": [round(x, 3) for x in restore_s],
            "speedup": round(recompute_s / statistics.median(restore_s), 1),
            "bytes": bytes_info}


def snapshot_bytes(coord: Coordinator, parent: int, epoch: int) -> dict[str, int]:
    """Bytes the epoch wrote, bytes of its state that changed (state files whose content is
    not in the parent's state), and the full state it holds."""
    before = {f.sha256 for h in coord.completed_handles(parent).values() for f in h.files}
    written = changed = full = 0
    for h in coord.completed_handles(epoch).values():
        written += h.bytes_written
        full += h.state_size
        changed += sum(f.size for f in h.files if f.sha256 not in before)
    return {"written": written, "changed_state": changed, "full_state": full}


# ---------------------------------------------------------------------------- overhead
class PassThroughWriter(SnapshotWriter):
    """Checkpointing off: the same jobs keep their state files where Spark wrote them;
    nothing is hashed, copied, referenced by content or acknowledged."""

    def add_file(self, name: str, path) -> FileRef:
        ref = FileRef(name, f"file://{Path(path).resolve()}", Path(path).stat().st_size, "0" * 64)
        self._files[name] = ref
        return ref

    def stage_output(self, output: str, paths: Sequence, rows=None, meta=None, names=None):
        refs = tuple(FileRef(Path(p).name, f"file://{Path(p).resolve()}", Path(p).stat().st_size,
                             "0" * 64) for p in paths)
        self._outputs[output] = OutputRef(refs, rows, dict(meta or {}))
        return self._outputs[output]


class _NoCoordinator:
    """Where the jobs' scratch lives when checkpointing is off (local); no documents are
    read or written, and each epoch's barrier is made here, for the jobs only."""

    def __init__(self, root: Path):
        self.storage, self.layout = LocalStorage(root), Layout("off")

    def barrier(self, epoch_id: int, until: int) -> Barrier:
        now = now_iso(time.time())
        return Barrier(pipeline_id="flights_daily", epoch_id=epoch_id, run_id=f"off-{epoch_id}",
                       lineage="off", plan=dict(PLAN), created_at=now, deadline=now,
                       config=CheckpointConfig(), mode="exactly_once",
                       data_interval=interval_until(until), publish_on_complete=False)


def run_unchecked(nc: _NoCoordinator, spark, data_uri: str, n: int, until: int,
                  previous: dict[str, StateHandle], work: Path) -> tuple[dict, float]:
    """One epoch of the same jobs with checkpointing off; state stays in ``work``."""
    t0 = time.perf_counter()
    barrier = nc.barrier(n, until)
    handles: dict[str, StateHandle] = {}
    for task, ups in EDGES.items():
        scratch = work / f"e{n}" / task
        scratch.mkdir(parents=True)
        writer = PassThroughWriter(nc.storage, nc.layout, n, task, 1,
                                   previous=previous.get(task))
        run = JobRun(barrier, n, task, 1, spark, open_storage(data_uri), previous.get(task),
                     {u: handles[u] for u in ups}, writer, scratch,
                     TaskStorage(nc.storage, nc.layout, n, task, 1), NoOperationLog())
        with attempt_caches():  # as run_task unpersists what each task cached
            res = JOBS[task](run)
        handles[task] = writer.handle(offsets=res.offsets, row_counts=res.row_counts)
    return handles, time.perf_counter() - t0


def overhead(spark, work: Path, data_uri: str, start: int, epochs: int) -> dict[str, Any]:
    """The same daily epochs of the whole pipeline with checkpointing on and off, in
    alternation (history first, as one epoch each)."""
    coord = Coordinator(LocalStorage(work / "ckpt-on"), "flights_daily")
    nc = _NoCoordinator(work / "off")
    run_plan(coord, spark, data_uri, EDGES, PLAN, "history", start)
    prev, _ = run_unchecked(nc, spark, data_uri, 1, start, {}, work / "off")
    on, off = [], []
    for i, n in enumerate(range(start, start + epochs)):
        _, secs = run_plan(coord, spark, data_uri, EDGES, PLAN, f"day-{n}", n + 1)
        on.append(secs)
        prev, secs = run_unchecked(nc, spark, data_uri, i + 2, n + 1, prev, work / "off")
        off.append(secs)
    return {"epochs": epochs, "on_seconds": round(statistics.median(on), 2),
            "off_seconds": round(statistics.median(off), 2),
            "on_all": [round(x, 2) for x in on], "off_all": [round(x, 2) for x in off]}


# ---------------------------------------------------------------------------- peer
def structured_streaming(spark, work: Path, data: LocalStorage, start: int, epochs: int,
                         ours_coord: Coordinator, data_uri: str) -> dict[str, Any]:
    """Spark Structured Streaming (Trigger.AvailableNow, a checkpointLocation) over the
    same raw files, one day arriving per epoch, computing the same route and carrier
    aggregates; side by side with our ingest + route/carrier stats epochs."""
    from pyspark.sql import functions as F

    from spark_jobs.flights.ingest_flights import FLIGHTS as SPEC

    src, chk = work / "ss-src", work / "ss-checkpoint"
    src.mkdir()
    from pyspark.sql import types as T

    raw_schema = T.StructType([T.StructField(c, T.StringType()) for c in SPEC.columns])

    def stage(n: int) -> None:
        key = f"raw/flights/{day(n).isoformat()}.csv"
        (src / Path(key).name).write_bytes(data.read(key)[0])

    def run_query() -> float:
        rows = spark.readStream.schema(raw_schema).option("header", True).csv(str(src))
        num = {c: F.col(c).cast("double") for c in ("dep_time", "dep_delay", "arr_delay",
                                                      "distance")}
        flights = rows.select(
            "year", "month", "day", "carrier", "flight", "origin", "dest",
            num["dep_time"].alias("dep_time"), num["dep_delay"].alias("dep_delay"),
            num["arr_delay"].alias("arr_delay"), num["distance"].alias("distance"),
        ).dropDuplicates(["year", "month", "day", "carrier", "flight", "origin"])
        t0 = time.perf_counter()
        for keys, name in ((ROUTE, "ss_route"), (CARRIER, "ss_carrier")):
            agg = flights.groupBy(*keys).agg(
                F.count("*").alias("flights"),
                F.sum(F.col("dep_time").isNull().cast("int")).alias("cancelled"),
                F.sum("dep_delay").alias("dep_delay_sum"), F.count("dep_delay").alias(
                    "dep_delay_n"), F.max("dep_delay").alias("dep_delay_max"),
                F.sum("arr_delay").alias("arr_delay_sum"), F.count("arr_delay").alias(
                    "arr_delay_n"), F.max("arr_delay").alias("arr_delay_max"),
                F.sum("distance").alias("distance_sum"))
            q = (agg.writeStream.outputMode("complete").format("memory").queryName(name)
                 .option("checkpointLocation", str(chk / name)).trigger(availableNow=True)
                 .start())
            q.awaitTermination()
        return time.perf_counter() - t0

    for n in range(1, start):
        stage(n)
    run_query()  # the history, as one first batch; ours, as one first epoch
    run_plan(ours_coord, spark, data_uri, STATS_EDGES, STATS_PLAN, "ss-history", start)
    theirs, ours = [], []
    for n in range(start, start + epochs):
        stage(n)
        theirs.append(run_query())
        _, secs = run_plan(ours_coord, spark, data_uri, STATS_EDGES, STATS_PLAN, f"ss-{n}",
                           n + 1)
        ours.append(secs)

    # Recovery: a crash after the batch's offsets were logged but before its commit leaves
    # the newest commit file missing; the restarted query reprocesses that batch. Ours: the
    # last task of the epoch dies after its snapshot and is retried.
    n = start + epochs
    stage(n)
    run_query()
    for name in ("ss_route", "ss_carrier"):
        commits = sorted((chk / name / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
        commits[-1].unlink()
        (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    their_recovery = run_query()
    eid, _ = run_plan(ours_coord, spark, data_uri, STATS_EDGES, STATS_PLAN, f"ss-{n}", n + 1,
                      fail="carrier_stats")
    t0 = time.perf_counter()
    run_task(JOBS["carrier_stats"], ours_coord, eid, "carrier_stats", 2, spark, data_uri)
    our_recovery = time.perf_counter() - t0
    ours_coord.complete(eid)

    equal = results_equal(spark, ours_coord)
    return {"epochs": epochs, "ours_epoch_seconds": round(statistics.median(ours), 2),
            "theirs_epoch_seconds": round(statistics.median(theirs), 2),
            "ours_recovery_seconds": round(our_recovery, 2),
            "theirs_recovery_seconds": round(their_recovery, 2),
            "ours_checkpoint_bytes": du(local_root(ours_coord.storage)),
            "theirs_checkpoint_bytes": du(chk), "results_equal": equal}


def ss_at_scale(spark, work: Path, scale: int, start: int, epochs: int) -> dict[str, Any]:
    """The Structured Streaming comparison on data landed at ``scale`` (rows per real row),
    with where our epochs' time goes (restore and run per task, and the rest: begin,
    snapshot hashing, acknowledgements, completion and publish)."""
    from checkpointing.views.stats import epoch_stats

    wdir = work / f"scale{scale}"
    data = LocalStorage(wdir / "data")
    land(data, [day(n) for n in range(1, start + epochs + 2)], scale=scale, seed=1)
    coord = Coordinator(LocalStorage(wdir / "ckpt"), "flights_stats")
    ss = structured_streaming(spark, wdir, data, start, epochs, coord, f"file://{wdir}/data")
    last = epoch_stats(coord, epochs + 1)  # the last daily epoch (1 is the history)
    tasks = {t.task_id: {"restore_ms": t.restore_ms, "run_ms": t.run_ms,
                         "sync_ms": t.sync_ms, "async_ms": t.async_ms} for t in last.tasks}
    in_tasks = sum((t["restore_ms"] or 0) + (t["run_ms"] or 0) for t in tasks.values())
    ss["where_ms"] = {"epoch": last.duration_ms, "tasks": tasks,
                      "outside_tasks": round((last.duration_ms or 0) - in_tasks, 1)}
    shutil.rmtree(wdir, ignore_errors=True)
    return ss


def results_equal(spark, coord: Coordinator) -> bool:
    """Our published gold tables against the streaming query's final aggregates."""
    import pandas as pd

    from bench.harness.oracle import published  # the published version, read through its table

    for keys, out, name in ((ROUTE, "gold_route_stats", "ss_route"),
                            (CARRIER, "gold_carrier_stats", "ss_carrier")):
        ours = published(coord, out)[keys + METRICS]
        theirs = spark.table(name).toPandas()[keys + METRICS]
        ours = ours.sort_values(keys).reset_index(drop=True)
        theirs = theirs.sort_values(keys).reset_index(drop=True)
        try:
            pd.testing.assert_frame_equal(ours, theirs, check_dtype=False, check_exact=False,
                                          rtol=1e-9)
        except AssertionError as exc:
            print(f"results differ ({out}): {str(exc)[:500]}", file=sys.stderr)
            return False
    return True


# ---------------------------------------------------------------------------- main
def record(out: Path, history: Path, bench: str, summary: dict[str, Any],
           details: Any) -> None:
    """Merge ``summary``'s keys into ``out`` (``details.<bench>`` holds ``details``), append
    them with the machine to ``history`` and print them: what every bench script ends with."""
    out.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(out.read_text()) if out.exists() else {}
    merged.update(summary)
    merged.setdefault("details", {})[bench] = details
    where = machine()
    # Which run each key comes from: the results page names it beside the figure.
    merged.setdefault("runs", {})[bench] = {"keys": sorted(summary), **where}
    out.write_text(json.dumps(merged, indent=2) + "\n")
    with open(history, "a") as fh:
        fh.write(json.dumps({"bench": bench, **summary, "machine": where}) + "\n")
    print(json.dumps(summary, indent=2))


def machine() -> dict[str, Any]:
    """Where and how a result was measured: the commit, the machine, the time and the
    command line."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"commit": commit, "python": platform.python_version(),
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "at": datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command()}


def command() -> str:
    """The command line that ran this process, as typed from the repository's root (the
    script's path relative to it): a figure's reader can run it again."""
    script = Path(sys.argv[0])
    with contextlib.suppress(ValueError):
        script = script.resolve().relative_to(ROOT)
    return shlex.join(["python", str(script), *sys.argv[1:]])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: D=30 only, one daily epoch")
    ap.add_argument("--scale", type=int, default=1, help="rows per real row (landing --scale)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--days", type=int, nargs="+", default=None,
                    help="the history lengths D of the recovery figure (default 30 90 180 "
                    "360; --quick: 30); the test suite's check of this script runs --quick "
                    "--days 3, every phase on the least data")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    a = ap.parse_args(argv)
    ds = tuple(a.days) if a.days else (30,) if a.quick else (30, 90, 180, 360)
    repeats = a.repeats or (1 if a.quick else 3)
    ss_epochs = 1 if a.quick else 4
    history_days = 2 if a.quick else 7  # before the daily epochs of the peer and overhead
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_jobs.runtime import spark_session

    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    t_all = time.perf_counter()
    phases: dict[str, float] = {}

    @contextmanager
    def phase(name: str):
        t0 = time.perf_counter()
        yield
        phases[name] = round(time.perf_counter() - t0, 1)
        # On stderr as each phase ends: a run stopped by a timeout shows how far it got.
        print(f"bench: {name} {phases[name]} s", file=sys.stderr, flush=True)

    # Structured Streaming's dedupe state at scale 100 needs more than the default 1 GB heap
    # (it ran out of it); --quick stays at the default.
    spark = spark_session("bench", conf=None if a.quick else {"spark.driver.memory": "6g"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        data = LocalStorage(work / "data")
        data_uri = f"file://{work}/data"
        land(data, [day(n) for n in range(1, max(ds) + 3)], scale=a.scale, seed=1)
        phases["start_and_land"] = round(time.perf_counter() - t_all, 1)
        # Warm-up: the JVM's first jobs pay class loading and JIT; no figure comes from it.
        # In --quick the overhead comparison goes first instead: its unmeasured history
        # epoch is the warm-up, which keeps the smoke run within its 2-minute budget.
        if a.quick:
            with phase("overhead"):
                over = overhead(spark, work, data_uri, history_days + 1, ss_epochs)
        else:
            with phase("warmup"):
                run_plan(Coordinator(LocalStorage(work / "warmup"), "flights_daily"), spark,
                         data_uri, EDGES, PLAN, "warmup", 3)
        with phase("recovery"):
            # The full-history recompute is repeated where it is short; at D=180 and 360 (30
            # and 50 s each) one run keeps the default scale within its 10-minute budget.
            rec = {d: recovery(spark, work, data_uri, d, repeats,
                               repeats if d <= 90 else 1) for d in ds}
        with phase("structured_streaming"):
            ss_coord = Coordinator(LocalStorage(work / "ckpt-ss"), "flights_stats")
            ss = structured_streaming(spark, work, data, history_days + 1, ss_epochs, ss_coord,
                                      data_uri)
        if not a.quick:
            with phase("overhead"):
                over = overhead(spark, work, data_uri, history_days + 1, ss_epochs)
        scales = {1: ss}
        with phase("structured_streaming_scales"):
            for sc in (() if a.quick else (10, 100)):
                scales[sc] = ss_at_scale(spark, work, sc * a.scale, history_days + 1,
                                         ss_epochs)
    finally:
        spark.stop()
    sdp: dict[str, Any] = {"vs_declarative_pipelines_epoch_ratio": None,
                           "results_equal": None}  # not measured in --quick
    if not a.quick:
        with phase("declarative_pipelines"):
            from bench.declarative_pipelines import measure

            sdp = measure(3, a.scale)
    sys.path.insert(0, str(ROOT / "bench"))
    from coordinator_bench import lookup_cost, page_refresh_cost

    t_lookup = time.perf_counter()
    lookup = lookup_cost(100 if a.quick else 10_000)
    page = page_refresh_cost(30 if a.quick else 365)
    phases["latest_lookup"] = round(time.perf_counter() - t_lookup, 1)
    first = rec[ds[0]]
    result: dict[str, Any] = {
        **{f"recovery_speedup_d{d}": rec[d]["speedup"] if d in rec else None
           for d in (30, 90, 180, 360)},
        "recovery_growth_360_over_30": (round(rec[360]["restore_seconds"] /
                                              rec[30]["restore_seconds"], 2)
                                        if 360 in rec else None),
        "epoch_growth_360_over_30": (round(rec[360]["normal_epoch_seconds"] /
                                           rec[30]["normal_epoch_seconds"], 2)
                                     if 360 in rec else None),
        "checkpoint_overhead_ratio": round(over["on_seconds"] / over["off_seconds"], 3),
        "incremental_bytes_ratio": round(first["bytes"]["written"] /
                                         max(first["bytes"]["changed_state"], 1), 2),
        "full_snapshot_bytes_ratio": round(first["bytes"]["full_state"] /
                                           max(first["bytes"]["changed_state"], 1), 2),
        "vs_structured_streaming_epoch_ratio": round(ss["ours_epoch_seconds"] /
                                                     ss["theirs_epoch_seconds"], 2),
        "vs_structured_streaming_recovery_ratio": round(ss["ours_recovery_seconds"] /
                                                        ss["theirs_recovery_seconds"], 2),
        **{f"vs_structured_streaming_epoch_ratio_scale{sc}":
           round(scales[sc]["ours_epoch_seconds"] / scales[sc]["theirs_epoch_seconds"], 2)
           if sc in scales else None for sc in (1, 10, 100)},
        "vs_declarative_pipelines_epoch_ratio": sdp["vs_declarative_pipelines_epoch_ratio"],
        "declarative_pipelines_results_equal": sdp["results_equal"],
        "ours_checkpoint_bytes": ss["ours_checkpoint_bytes"],
        "structured_streaming_checkpoint_bytes": ss["theirs_checkpoint_bytes"],
        "structured_streaming_results_equal": all(x["results_equal"]
                                                  for x in scales.values()),
        "latest_lookup_requests_10000": lookup.get("latest_lookup_requests_at_10000"),
        "epochs_page_requests_365": None if a.quick else page["requests_warm"],
        "details": {"recovery": rec, "structured_streaming": ss, "overhead": over,
                    "declarative_pipelines": sdp,
                    "structured_streaming_scales": {str(k): v for k, v in scales.items()
                                                    if k != 1},
                    "latest_lookup": lookup, "epochs_page_refresh": page,
                    "phase_seconds": phases},
        "quick": a.quick, "days": list(ds), "scale": a.scale, "repeats": repeats,
        "seconds": round(time.perf_counter() - t_all, 1), "machine": machine(),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    a.history.parent.mkdir(parents=True, exist_ok=True)
    with open(a.history, "a") as fh:
        fh.write(json.dumps({k: v for k, v in result.items() if k != "details"}) + "\n")
    print_table(result)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if result["structured_streaming_results_equal"] and \
        sdp["results_equal"] is not False else 1


def print_table(r: dict[str, Any]) -> None:
    print(f"\n{'metric':<42} value")
    for k, v in r.items():
        if k not in ("details", "machine"):
            print(f"{k:<42} {v}")


if __name__ == "__main__":
    sys.exit(main())
