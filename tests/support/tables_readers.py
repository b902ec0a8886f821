"""Readers of Delta tables that this project did not write: delta-rs (``deltalake``) and
DuckDB's delta extension (delta-kernel-rs), the extension loaded from its PyPI package."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse


def rows_deltalake(location: str, endpoint: str | None = None,
                   version: int | None = None) -> list[tuple]:
    from deltalake import DeltaTable

    from checkpointing.tables.delta import storage_options, table_path

    dt = DeltaTable(table_path(location), version=version,
                    storage_options=storage_options(location, endpoint))
    t = dt.to_pyarrow_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in sorted(t.column_names)), strict=True))


def _extension(name: str) -> str:
    import duckdb_ext

    found = list(Path(duckdb_ext.__path__[0]).glob(f"extensions/*/*/{name}.duckdb_extension"))
    assert found, f"DuckDB extension {name} is not installed (requirements-dev.txt)"
    return str(found[0])


def rows_duckdb(location: str, endpoint: str | None = None) -> list[tuple]:
    import os

    import duckdb

    con = duckdb.connect()
    con.execute(f"LOAD '{_extension('delta')}'")
    path = urlparse(location).path if location.startswith("file://") else location
    if location.startswith("s3://"):
        con.execute(f"LOAD '{_extension('httpfs')}'")
        host = urlparse(endpoint).netloc
        con.execute(f"""CREATE SECRET s3 (TYPE S3, KEY_ID '{os.environ["AWS_ACCESS_KEY_ID"]}',
                        SECRET '{os.environ["AWS_SECRET_ACCESS_KEY"]}', ENDPOINT '{host}',
                        URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')""")
    rel = con.execute(f"SELECT * FROM delta_scan('{path}')")
    cols = [d[0] for d in rel.description]
    order = sorted(range(len(cols)), key=lambda i: cols[i])
    return sorted(tuple(r[i] for i in order) for r in rel.fetchall())


#: Two epochs of a Spark job writing a ``replace_partitions`` table: day d1 kept from the
#: first, d2 corrected and d3 added by the second.
SPARK_EPOCHS = {1: [("a", 1, "d1"), ("b", 2, "d2")], 2: [("b", 5, "d2"), ("c", 3, "d3")]}
SPARK_EXPECTED = [("d1", "a", 1), ("d2", "b", 5), ("d3", "c", 3)]


def spark_table_epochs(c, spec, connect_url: str, endpoint: str) -> list[tuple]:
    """Run SPARK_EPOCHS through JobRun.write_table on the Spark Connect server, complete
    each epoch, and return the published table as Spark reads it (read_published)."""
    from checkpointing.protocol.barrier import TaskPlan
    from spark_jobs.runtime import JobResult, read_published, run_task, spark_session

    spark = spark_session("tables", s3=True, endpoint_url=endpoint, remote=connect_url)
    try:
        for n, rows in SPARK_EPOCHS.items():
            b = c.begin_epoch({"gold": TaskPlan((), True)}, f"r{n}")

            def job(run, rows=rows):
                df = run.spark.createDataFrame(rows, "key string, value long, day string")
                run.write_table(df, "t", spec, rows=len(rows))
                return JobResult(row_counts={"t": len(rows)})

            run_task(job, c, b.epoch_id, "gold", 1, spark, "", endpoint_url=endpoint)
            c.complete(b.epoch_id)
        return sorted(tuple(r) for r in read_published(spark, c, "t")
                      .select("day", "key", "value").collect())
    finally:
        spark.stop()


def die_after_table_commit(c, epoch_id: int, endpoint: str | None) -> None:
    """Complete epoch ``epoch_id`` in another process that exits (os._exit, as a SIGKILL
    would end it) right after the table commits, before the manifest is written."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    child = f"""
import os, sys
sys.path.insert(0, {str(root)!r})
import checkpointing.coordination.epoch_finisher as finisher
from checkpointing import Coordinator, open_storage
finisher.publish = lambda *a, **k: os._exit(9)   # dies between the table commit and the manifest
storage = open_storage({c.storage.uri("").rstrip("/")!r}, endpoint_url={endpoint!r})
Coordinator(storage, "p").complete({epoch_id})
"""
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                       timeout=120, env=os.environ.copy())
    assert r.returncode == 9, r.stderr[-2000:]


#: A source task and a publishing task: the plan of the table tests' epochs.
def _plan():
    from checkpointing.protocol.barrier import TaskPlan

    return {"src": TaskPlan(), "gold": TaskPlan(("src",), True)}


def _parquet(tmp: Path, name: str, rows: list[tuple[str, int, str]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"key": pa.array([r[0] for r in rows], pa.string()),
                             "value": pa.array([r[1] for r in rows], pa.int64()),
                             "day": pa.array([r[2] for r in rows], pa.string())}), path)
    return path


def table_epoch(c, tmp: Path, spec, rows: list[tuple[str, int, str]], run: str, *,
                complete: bool = True, grows: bool = False, **begin):
    """One epoch whose ``gold`` task stages ``rows`` (key, value, day) as table output
    ``t``, a file per day for a table partitioned by day (in the directories its format
    names them: ``day=`` for Delta, ``p_day=`` for Iceberg); ``begin``: the epoch's
    lineage, data interval, publication and promotion. Returns the decision, or the
    barrier when not ``complete``. ``grows``: ``rows`` are added to the table's content
    after the restored epoch, whose files are kept."""
    from checkpointing import SnapshotWriter

    plan = _plan()
    b = c.begin_epoch(plan, run, **begin)
    for task in plan:
        c.register_attempt(b.epoch_id, task, 1)
    w = SnapshotWriter(c.storage, c.layout, b.epoch_id, "src", 1)
    c.acknowledge(b.epoch_id, "src", 1, w.handle())
    w = SnapshotWriter(c.storage, c.layout, b.epoch_id, "gold", 1,
                       previous=c.restore_handle(b.epoch_id, "gold"))
    if spec.partition_by:
        days = sorted({r[2] for r in rows})
        names = [f"{spec.partition_dir_prefix}day={d}/part-0.parquet" for d in days]
        paths = [_parquet(tmp, f"{run}/{n}", [r for r in rows if r[2] == d])
                 for n, d in zip(names, days, strict=True)]
    else:
        paths, names = [_parquet(tmp, f"{run}/part-0.parquet", rows)], None
    w.stage_table_output("t", spec, paths, rows=len(rows), names=names, grows=grows)
    c.acknowledge(b.epoch_id, "gold", 1, w.handle())
    return c.complete(b.epoch_id) if complete else b
