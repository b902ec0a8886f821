"""Table inputs at scale (PROTOCOL 6.14): a downstream pipeline reading an upstream Delta
table incrementally while another writer changes 1 % of it per version.

The upstream: ``--rows`` rows (default 10 million: id, bucket, value) written by delta-rs,
partitioned by ``bucket`` into 100 buckets; each upstream version replaces one bucket with
new values (1 % of the rows: a partition replacement, so the change holds retractions).
The downstream: one checkpointed task on a Spark Connect server keeping count and
sum(value) per bucket from ``run.table_changes`` (its state), published as an overwrite
Delta table; one downstream epoch per upstream version, up to ``--versions`` (default 100).

Keys (medians of the measured epochs, written to bench/results/latest.json):

- ``table_input_read_over_changed``: bytes the Spark Connect server read in the epoch
  (its processes' ``rchar``: data, state and anything else it read) / bytes the upstream
  versions of the epoch's range changed (the data files they added and removed, found by diffing the
  two snapshots with delta-rs, independently of the reader). Target <= 1.5.
- ``table_input_vs_full_reread``: an incremental epoch's time / the time of the same job
  reading the whole table at the same version (a first read: a pipeline of its own each
  time), same server. Target <= 0.1.
- ``table_input_unchanged_epoch_s`` (a control): the median of three epochs with no
  upstream change, an empty change set: the epoch's floor (barrier, state, commit).
- ``table_input_history_ratio``: epoch time after about 100 upstream versions (the last
  ``--measure`` epochs) / after about 10 (epochs at versions 2..``--measure`` + 1).
  Target <= 1.2.

With ``--dv`` the upstream is written by Spark (Delta's Spark runtime on the same Connect
server) with deletion vectors on: 100 files of contiguous ids, and each upstream step one
DELETE of 1 % of the rows (half of two adjacent files: deletion vectors, no rewrite) and an
append of 1 %, so two table versions per step. Keys ``table_input_dv_vs_full_reread``
(target <= 0.1) and ``table_input_dv_read_over_changed`` (bytes read / bytes of the files
the step's commits name, whose deletion vectors changed or which they added; <= 1.5);
the downstream is compared with Spark's own read of the upstream.

With ``--iceberg`` the upstream is an Iceberg table (format 2) Spark writes merge-on-read in
a SQL catalog over SQLite, which pyiceberg reads too: the same 100 files and the same step
(a DELETE of 1 %, which writes position delete files, and an append of 1 %). Keys
``table_input_iceberg_deletes_vs_full_reread`` (target <= 0.1) and
``table_input_iceberg_deletes_read_over_changed`` (bytes read / bytes of the data files the
step added or whose deletes changed, plus the delete files it wrote, found from pyiceberg's
plan of the two snapshots; <= 1.5).

    python bench/table_input_bench.py [--rows 10000000] [--versions 100] [--measure 9]
                                      [--dv | --iceberg]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkpointing import Coordinator, LocalStorage, TableInput, TableSpec  # noqa: E402
from checkpointing.config import CheckpointConfig  # noqa: E402
from checkpointing.protocol.barrier import plan_from_edges  # noqa: E402
from spark_jobs.runtime import JobResult, Pipeline, drive_epoch  # noqa: E402

RESULTS = ROOT / "bench" / "results"
BUCKETS = 100
STATE = "bucket int, n long, total long"


def upstream_write(location: str, rows: int, bucket: int | None, seed: int) -> None:
    """The whole table (``bucket`` None) or one bucket replaced, by delta-rs."""
    import numpy as np
    import pandas as pd
    from deltalake import write_deltalake

    rng = np.random.default_rng(seed)
    per = rows // BUCKETS
    if bucket is None:
        df = pd.DataFrame({"id": np.arange(rows, dtype="int64"),
                           "bucket": np.repeat(np.arange(BUCKETS, dtype="int32"), per),
                           "value": rng.integers(0, 1000, rows, dtype="int64")})
        write_deltalake(location, df, partition_by=["bucket"])
        return
    df = pd.DataFrame({"id": np.arange(bucket * per, (bucket + 1) * per, dtype="int64"),
                       "bucket": np.full(per, bucket, dtype="int32"),
                       "value": rng.integers(0, 1000, per, dtype="int64")})
    write_deltalake(location, df, mode="overwrite", predicate=f"bucket = {bucket}")


def spark_upstream_write(spark: Any, path: str, rows: int, step: int) -> None:
    """Step 0: the whole table, by Spark, deletion vectors on; step n: a DELETE of 1 % of
    the rows (the second half of file i, the first half of file i+1) and an append of 1 %."""
    per = rows // BUCKETS
    cols = ("id", f"CAST(id % {BUCKETS} AS INT) AS bucket", "id * 7 % 1000 AS value")
    if step == 0:
        spark.range(0, rows, 1, BUCKETS).selectExpr(*cols).write.format("delta") \
            .option("delta.enableDeletionVectors", "true").save(path)
        return
    lo = ((step - 1) % (BUCKETS - 1)) * per + per // 2
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id >= {lo} AND id < {lo + per}")
    spark.range(rows + (step - 1) * per, rows + step * per, 1, 1).selectExpr(*cols) \
        .write.format("delta").mode("append").save(path)


ICEBERG_TABLE = "bench.bench.up"


def iceberg_upstream_write(spark: Any, rows: int, step: int) -> None:
    """Step 0: the whole table, by Spark, merge-on-read deletes; step n: a DELETE of 1 % of
    the rows (position delete files for two adjacent data files) and an append of 1 %."""
    per = rows // BUCKETS
    cols = ("id", f"CAST(id % {BUCKETS} AS INT) AS bucket", "id * 7 % 1000 AS value")
    if step == 0:
        spark.sql(f"CREATE TABLE {ICEBERG_TABLE} (id BIGINT, bucket INT, value BIGINT) "
                  "USING iceberg TBLPROPERTIES ('format-version' = '2', "
                  "'write.delete.mode' = 'merge-on-read', "
                  "'write.distribution-mode' = 'none')")
        spark.range(0, rows, 1, BUCKETS).selectExpr(*cols).writeTo(ICEBERG_TABLE).append()
        return
    lo = ((step - 1) % (BUCKETS - 1)) * per + per // 2
    spark.sql(f"DELETE FROM {ICEBERG_TABLE} WHERE id >= {lo} AND id < {lo + per}")
    spark.range(rows + (step - 1) * per, rows + step * per, 1, 1).selectExpr(*cols) \
        .writeTo(ICEBERG_TABLE).append()


def iceberg_bytes_changed(before: int | None, after: int | None) -> int:
    """Bytes a change between two snapshots has to read at least: the data files added or
    removed or whose delete files changed, and the delete files ``after`` has that
    ``before`` lacks (pyiceberg's plan of each snapshot, independent of the reader)."""
    from pyiceberg.catalog import load_catalog

    table = load_catalog("bench").load_table("bench.up")

    def plan(snap: int | None) -> dict[str, tuple[int, dict[str, int]]]:
        if snap is None:
            return {}
        return {t.file.file_path: (int(t.file.file_size_in_bytes),
                                   {d.file_path: int(d.file_size_in_bytes)
                                    for d in t.delete_files})
                for t in table.scan(snapshot_id=snap).plan_files()}

    a, b = plan(before), plan(after)
    changed = {p for p in a.keys() | b.keys()
               if p not in a or p not in b or a[p][1].keys() != b[p][1].keys()}
    old_deletes = {d for _, ds in a.values() for d in ds}
    new_deletes = {d: size for _, ds in b.values() for d, size in ds.items()
                   if d not in old_deletes}
    return sum((a.get(p) or b[p])[0] for p in changed) + sum(new_deletes.values())


def log_bytes_changed(location: str, before: int, after: int) -> int:
    """Bytes of the data files the commits ``before+1 .. after`` name with data change
    (added, removed, or with a new deletion vector), from the Delta log itself."""
    import json

    sizes: dict[str, int] = {}
    for v in range(before + 1, after + 1):
        for line in Path(f"{location}/_delta_log/{v:020d}.json").read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            for kind in ("add", "remove"):
                a = action.get(kind)
                if a and a.get("dataChange", True):
                    sizes[a["path"]] = int(a.get("size") or 0)
    return sum(sizes.values())


def bytes_changed(location: str, before: int, after: int) -> int:
    """Bytes of the data files that differ between two snapshots (added plus removed)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    def files(v: int) -> dict[str, int]:
        t = pa.table(DeltaTable(location, version=v).get_add_actions(flatten=True))
        return dict(zip(t.column("path").to_pylist(), t.column("size_bytes").to_pylist(),
                        strict=True))

    a, b = files(before), files(after)
    return sum(s for p, s in a.items() if p not in b) + sum(s for p, s in b.items()
                                                            if p not in a)


def sums_job(out: str):
    def job(run):
        from pyspark.sql import functions as F

        ch = run.table_changes("src")
        state = run.read_parquet(run.files(run.previous, "sums/"), STATE)
        delta = ch.signed().groupBy("bucket").agg(F.sum("_sign").alias("n"),
                                                 F.sum(F.col("value") * F.col("_sign"))
                                                 .alias("total"))
        new = (state.unionByName(delta).groupBy("bucket")
               .agg(F.sum("n").alias("n"), F.sum("total").alias("total")))
        run.write_state(new.coalesce(1), "sums")
        run.write_table(run.read_parquet(run.writer.files("sums/"), STATE), "sums",
                        TableSpec(out, "overwrite"))
        return JobResult(metrics={"read": ch.metrics()})

    return job


def bytes_read(pid: int) -> int:
    """Bytes the process ``pid`` and its descendants have read through system calls
    (``rchar`` of /proc/<pid>/io): the Spark Connect server's reads of data and state files,
    page cache or not. (Spark's own stage ``inputBytes`` undercounts local Parquet reads.)"""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/io").read_text().splitlines():
                if line.startswith("rchar:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def run(rows: int, versions: int, measure: int, work: Path, dv: bool = False,
        iceberg: bool = False) -> dict[str, Any]:
    import os

    from spark_jobs.runtime.connect_server import ConnectServer
    from spark_jobs.runtime.processes import free_port

    up = f"{work}/upstream"
    if iceberg:  # one catalog: the server's Iceberg JDBC catalog and pyiceberg's SQL one
        os.environ["PYICEBERG_CATALOG__BENCH__TYPE"] = "sql"
        os.environ["PYICEBERG_CATALOG__BENCH__URI"] = f"sqlite:///{work}/catalog.db"
        os.environ["PYICEBERG_CATALOG__BENCH__WAREHOUSE"] = f"file://{work}/warehouse"
    server = ConnectServer(port=free_port(), driver_memory="4g", log_path=work / "connect.log",
                           conf={"spark.sql.shuffle.partitions": "4"}).start()
    spark = server.session("table-input-bench")
    t0 = time.perf_counter()
    snapshots: list[int | None] = []

    def write(step: int) -> None:
        if iceberg:
            iceberg_upstream_write(spark, rows, step)
            from pyiceberg.catalog import load_catalog

            snap = load_catalog("bench").load_table("bench.up").current_snapshot()
            snapshots.append(snap.snapshot_id if snap else None)
        elif dv:
            spark_upstream_write(spark, up, rows, step)
        else:
            upstream_write(up, rows, None if step == 0 else step % BUCKETS, step)

    if iceberg:
        spark.sql("CREATE NAMESPACE IF NOT EXISTS bench.bench")
    write(0)
    print(f"upstream: {rows} rows in {time.perf_counter() - t0:.1f}s", flush=True)
    storage = LocalStorage(work / "ckpt")

    def pipeline(pid: str, verify: bool = False) -> tuple[Coordinator, Pipeline]:
        src = TableInput(None, "iceberg", name="bench.up", catalog="bench") if iceberg \
            else TableInput(up)
        plan = plan_from_edges({"agg": []}, {"agg"}, {"agg": {"src": src}})
        job = sums_job(f"file://{work}/out-{pid}")
        config = CheckpointConfig(verify_table_inputs_every=1) if verify else None
        return Coordinator(storage, pid, config), Pipeline({"agg": []}, {"agg": job}, plan)

    def epoch(c: Coordinator, pipe: Pipeline, run_id: str) -> dict[str, Any]:
        before = bytes_read(server.proc.pid)
        t = time.perf_counter()
        e, meta = drive_epoch(pipe, c, spark, "", run_id)
        seconds = time.perf_counter() - t
        read_bytes = bytes_read(server.proc.pid) - before
        assert meta is not None and meta.completed, meta
        read = c.completed_handles(e)["agg"].metrics["read"]
        return {"epoch": e, "seconds": seconds, "read": read, "input_bytes": read_bytes}

    try:
        c, pipe = pipeline("down")
        first = epoch(c, pipe, "v0")
        print(f"first (full) read: {first['seconds']:.1f}s", flush=True)
        epochs = []
        version = 0
        for v in range(1, versions + 1):
            write(v)
            before, version = version, version + (2 if dv or iceberg else 1)
            e = epoch(c, pipe, f"v{v}")
            e["upstream_version"] = version
            if iceberg:
                e["bytes_changed"] = iceberg_bytes_changed(snapshots[-2], snapshots[-1])
            else:
                e["bytes_changed"] = (log_bytes_changed if dv else bytes_changed)(
                    up, before, version)
            epochs.append(e)
            if v % 10 == 0:
                print(f"version {v}: {e['seconds']:.2f}s, read {e['input_bytes']} B of "
                      f"{e['bytes_changed']} B changed", flush=True)
        # The verify switch's cost: a second pipeline checking every change set against the
        # difference of the two snapshots, each of its epochs paired with a plain one over
        # the same upstream version.
        vc, vpipe = pipeline("verified", verify=True)
        epoch(vc, vpipe, "v0")
        paired = []
        for v in range(versions + 1, versions + 4):
            write(v)
            paired.append((epoch(c, pipe, f"v{v}")["seconds"],
                           epoch(vc, vpipe, f"v{v}")["seconds"]))
        # The floor (a control): epochs of the same pipeline with no upstream change, so
        # an empty change set: what an epoch costs before it reads anything.
        unchanged = [epoch(c, pipe, f"same{i}") for i in range(3)]
        full = []
        for i in range(3):  # the control: the same job reading the whole table, same version
            fc, fpipe = pipeline(f"full{i}")
            full.append(epoch(fc, fpipe, "full"))
        # equal to an independent computation over the table's final content: Spark's own
        # Delta reader (which applies deletion vectors itself)
        from deltalake import DeltaTable
        from pyspark.sql import functions as F

        upstream = spark.table(ICEBERG_TABLE) if iceberg else \
            spark.read.format("delta").load(up)
        df = upstream.groupBy("bucket").agg(
            F.count("*").alias("n"), F.sum("value").alias("total")).toPandas()
        want = {int(r.bucket): (int(r.n), int(r.total)) for r in df.itertuples()}
        got = DeltaTable(f"{work}/out-down").to_pandas()  # delta-rs: a plain path
        assert {int(r.bucket): (int(r.n), int(r.total)) for r in got.itertuples()} == want
    finally:
        spark.stop()
        server.stop()
    early = epochs[1:1 + measure]
    late = epochs[-measure:]
    incr = statistics.median(e["seconds"] for e in epochs)
    summary = {
        "table_input_rows": rows,
        "table_input_read_over_changed": round(statistics.median(
            e["input_bytes"] / e["bytes_changed"] for e in epochs), 3),
        "table_input_files_read_over_changed": round(statistics.median(
            (e["read"]["bytes_added"] + e["read"]["bytes_removed"]) / e["bytes_changed"]
            for e in epochs), 3),
        "table_input_epoch_s": round(incr, 2),
        "table_input_full_reread_s": round(statistics.median(f["seconds"] for f in full), 2),
        "table_input_unchanged_epoch_s": round(statistics.median(
            e["seconds"] for e in unchanged), 2),
        "table_input_history_ratio": round(statistics.median(e["seconds"] for e in late)
                                           / statistics.median(e["seconds"] for e in early), 3),
    }
    summary["table_input_vs_full_reread"] = round(
        incr / summary["table_input_full_reread_s"], 3)
    summary["table_input_verified_epoch_ratio"] = round(
        statistics.median(b for _, b in paired) / statistics.median(a for a, _ in paired), 3)
    if dv:  # the same figures, under the keys of the deletion-vector upstream
        summary = {k.replace("table_input_", "table_input_dv_"): v for k, v in summary.items()}
    if iceberg:  # and of the Iceberg upstream with position deletes
        summary = {k.replace("table_input_", "table_input_iceberg_deletes_"): v
                   for k, v in summary.items()}
    return {**summary, "details": {"first": first, "epochs": epochs, "full": full,
                                   "unchanged": unchanged, "verified_pairs": paired}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="table_input_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--versions", type=int, default=100)
    ap.add_argument("--measure", type=int, default=9)
    ap.add_argument("--dv", action="store_true",
                    help="an upstream written by Spark with deletion vectors")
    ap.add_argument("--iceberg", action="store_true",
                    help="an Iceberg upstream written by Spark with merge-on-read deletes")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    a = ap.parse_args(argv)
    from bench.pipeline_bench import record

    with tempfile.TemporaryDirectory(prefix="ckpt-table-inputs-") as tmp:
        result = run(a.rows, a.versions, a.measure, Path(tmp), a.dv, a.iceberg)
    details = result.pop("details")
    kind = "table_inputs_iceberg" if a.iceberg else "table_inputs_dv" if a.dv \
        else "table_inputs"
    record(a.out, a.history, kind, result, details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
