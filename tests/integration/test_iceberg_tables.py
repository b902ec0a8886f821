"""Table outputs as Apache Iceberg tables (PROTOCOL 6.12): a completed epoch is one Iceberg
snapshot per output carrying the epoch id in its summary, exactly once, in a real catalog
(pyiceberg's SQL catalog on the tests' PostgreSQL), read by pyiceberg and by DuckDB's
iceberg extension, on the filesystem and on the S3 server. The expected rows are computed
here from what each epoch staged."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from bench.harness.race import race
from checkpointing import Coordinator
from checkpointing.records.two_phase_publish import published_tables, read_manifest
from checkpointing.tables.commit import commit_tables
from checkpointing.tables.iceberg import open_table
from checkpointing.tables.spec import TableSpec, app_id
from tests.support.tables_readers import (
    SPARK_EXPECTED,
    _extension,
    die_after_table_commit,
    spark_table_epochs,
    table_epoch,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def catalog_url():
    """A database of its own on the tests' PostgreSQL for the SQL catalog."""
    from bench.harness.pg import fresh_database

    return fresh_database(f"ckpt_iceberg_{os.getpid()}")


@pytest.fixture(params=["local", "s3"])
def env(request, tmp_path, catalog_url, monkeypatch):
    """(coordinator, table location root, S3 endpoint or None); the catalog ``ckpt`` is
    configured the way users configure pyiceberg, by its environment variables."""
    monkeypatch.setenv("PYICEBERG_CATALOG__CKPT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__CKPT__URI", catalog_url)
    if request.param == "local":
        from checkpointing import LocalStorage

        return Coordinator(LocalStorage(tmp_path / "ckpt"), "p"), f"file://{tmp_path}/wh", None
    storage = request.getfixturevalue("s3_storage")
    server = request.getfixturevalue("s3_server")
    return (Coordinator(storage, "p"), f"s3://{storage.bucket}/warehouse", server.endpoint)


def _spec(wh: str, mode: str, partition_by: tuple[str, ...] = ()) -> TableSpec:
    name = f"gold.t_{uuid.uuid4().hex[:10]}"  # one table per test in the shared catalog
    return TableSpec(f"{wh}/{name}", mode, partition_by, format="iceberg", name=name,
                     catalog="ckpt")


_epoch = table_epoch


def rows_pyiceberg(spec: TableSpec, endpoint: str | None,
                   snapshot_id: int | None = None) -> list[tuple]:
    t = open_table(spec, endpoint).scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(zip(*(t.column(c).to_pylist() for c in ("day", "key", "value")), strict=True))


def rows_duckdb(spec: TableSpec, endpoint: str | None) -> list[tuple]:
    """DuckDB's iceberg extension, reading the table's current metadata file (what the
    catalog points at), not through this project's code."""
    import duckdb

    meta = open_table(spec, endpoint).metadata_location
    con = duckdb.connect()
    con.execute(f"LOAD '{_extension('avro')}'")
    con.execute(f"LOAD '{_extension('iceberg')}'")
    if meta.startswith("s3://"):
        from urllib.parse import urlparse

        con.execute(f"LOAD '{_extension('httpfs')}'")
        con.execute(f"""CREATE SECRET s3 (TYPE S3, KEY_ID '{os.environ["AWS_ACCESS_KEY_ID"]}',
                        SECRET '{os.environ["AWS_SECRET_ACCESS_KEY"]}',
                        ENDPOINT '{urlparse(endpoint).netloc}', URL_STYLE 'path',
                        USE_SSL false, REGION 'us-east-1')""")
    else:
        meta = meta.removeprefix("file://")
    return sorted(con.execute(f"SELECT day, key, value FROM iceberg_scan('{meta}')").fetchall())


def _snapshots(spec: TableSpec, endpoint: str | None) -> list[str | None]:
    """The epoch each snapshot of the table holds, oldest first."""
    t = open_table(spec, endpoint)
    return [s.summary.get("ckpt.epoch_id") if s.summary else None for s in t.snapshots()]


def test_append_one_snapshot_per_completed_epoch(env, tmp_path):
    c, wh, endpoint = env
    spec = _spec(wh, "append")
    batches = {1: [("a", 1, "d1"), ("b", 2, "d1")], 2: [("c", 3, "d2")], 4: [("d", 4, "d3")]}
    _epoch(c, tmp_path, spec, batches[1], "r1")
    _epoch(c, tmp_path, spec, batches[2], "r2")
    aborted = _epoch(c, tmp_path, spec, [("x", 99, "dX")], "r3", complete=False)
    c.abort(aborted.epoch_id, "declined", "bad rows")
    _epoch(c, tmp_path, spec, batches[4], "r4")
    expected = sorted((d, k, v) for rows in batches.values() for k, v, d in rows)
    assert rows_pyiceberg(spec, endpoint) == expected
    assert rows_duckdb(spec, endpoint) == expected
    assert _snapshots(spec, endpoint) == ["1", "2", "4"]  # none for the aborted epoch 3
    m = read_manifest(c.storage, c.layout)
    current = open_table(spec, endpoint).current_snapshot().snapshot_id
    assert m.outputs["t"].meta["table_version"] == current
    assert published_tables(m, 4) == {"t": current}


def test_replace_partitions_and_time_travel_by_epoch(env, tmp_path):
    c, wh, endpoint = env
    spec = _spec(wh, "replace_partitions", ("day",))
    _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 1, "d2")], "r1")
    # epoch 2 corrects day d2 and adds d3; d1 stays as epoch 1 wrote it (kept by reference)
    _epoch(c, tmp_path, spec, [("b", 7, "d2"), ("c", 3, "d3")], "r2")
    expected = [("d1", "a", 1), ("d2", "b", 7), ("d3", "c", 3)]
    assert rows_pyiceberg(spec, endpoint) == expected
    assert rows_duckdb(spec, endpoint) == expected
    m = read_manifest(c.storage, c.layout)
    v1 = published_tables(m, 1)["t"]
    assert rows_pyiceberg(spec, endpoint, v1) == [("d1", "a", 1), ("d2", "b", 1)]
    t = open_table(spec, endpoint)
    assert [f.name for f in t.spec().fields] == ["day"]  # identity partition on day


def test_an_output_partitioned_otherwise_than_its_table_is_refused(env, tmp_path):
    """An unpartitioned output of a table partitioned by day (its file holds two days,
    which Iceberg cannot file under one partition), and a partitioned output of an
    unpartitioned table, are refused in one line; each table stays as it was."""
    from checkpointing.tables.spec import TableCommitError

    c, wh, endpoint = env
    by_day = _spec(wh, "replace_partitions", ("day",))
    _epoch(c, tmp_path, by_day, [("a", 1, "d1"), ("b", 1, "d2")], "r1")
    refused = r"partitioned by \['day'\], its output by nothing"
    with pytest.raises(TableCommitError, match=refused):
        _epoch(c, tmp_path, TableSpec(by_day.location, "overwrite", format="iceberg",
                                      name=by_day.name, catalog="ckpt"),
               [("c", 3, "d3"), ("d", 4, "d4")], "r2")
    assert rows_pyiceberg(by_day, endpoint) == [("d1", "a", 1), ("d2", "b", 1)]
    # The refused epoch stays decided and unpublished (its publish step refuses again at
    # the next begin): the other table gets a pipeline of its own. Its partitioned output
    # is refused when the task stages it (the previous epoch's files have no partition).
    c = Coordinator(c.storage, "q")
    whole = _spec(wh, "overwrite")
    _epoch(c, tmp_path, whole, [("a", 1, "d1")], "r3")
    staged_otherwise = r"'t' is partitioned by nothing, its output by \['day'\]"
    with pytest.raises(TableCommitError, match=staged_otherwise):
        _epoch(c, tmp_path, TableSpec(whole.location, "replace_partitions", ("day",),
                                      format="iceberg", name=whole.name, catalog="ckpt"),
               [("b", 2, "d2")], "r4")
    assert rows_pyiceberg(whole, endpoint) == [("d1", "a", 1)]


def test_a_commit_step_killed_after_the_table_commit_commits_nothing_twice(env, tmp_path):
    c, wh, endpoint = env
    spec = _spec(wh, "append")
    _epoch(c, tmp_path, spec, [("a", 1, "d1")], "r1")
    b = _epoch(c, tmp_path, spec, [("b", 2, "d2")], "r2", complete=False)
    die_after_table_commit(c, b.epoch_id, endpoint)
    assert _snapshots(spec, endpoint) == ["1", "2"]
    assert read_manifest(c.storage, c.layout).epoch_id == 1
    assert Coordinator(c.storage, "p").complete(b.epoch_id).completed  # the retry
    assert _snapshots(spec, endpoint) == ["1", "2"]
    assert rows_pyiceberg(spec, endpoint) == [("d1", "a", 1), ("d2", "b", 2)]


def test_racing_commit_steps_make_one_snapshot(env, tmp_path):
    c, wh, endpoint = env
    spec = _spec(wh, "append")  # the table does not exist yet: creation races too
    b = _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 2, "d1")], "r1", complete=False)
    outputs = c.read_ack(c.layout.attempt_object(b.epoch_id, "gold", 1, "ack")) \
        .state_handle.outputs
    results, errors = race(lambda _: commit_tables("p", "main", b.epoch_id, outputs, endpoint)[
        "t"].meta["table_version"], 4)
    assert not errors, errors
    assert _snapshots(spec, endpoint) == [str(b.epoch_id)]
    assert set(results) == {open_table(spec, endpoint).current_snapshot().snapshot_id}
    assert rows_pyiceberg(spec, endpoint) == [("d1", "a", 1), ("d1", "b", 2)]
    summary = open_table(spec, endpoint).current_snapshot().summary
    assert summary.get("ckpt.app_id") == app_id("p", "main", "t")


def test_backfill_promotion_is_one_snapshot(env, tmp_path):
    from checkpointing.records.backfill_lineages import new_origin, record_origin

    c, wh, endpoint = env
    spec = _spec(wh, "replace_partitions", ("day",))

    def day(d: str, k: str, v: int, **kw):
        return _epoch(c, tmp_path, spec, [(k, v, d)], f"{kw.get('lineage', 'main')}-{d}",
                      data_interval={"start": d, "end": d}, **kw)

    for n, d in enumerate(("2013-01-01", "2013-01-02", "2013-01-03"), 1):
        day(d, f"k{n}", n)
    record_origin(c.storage, c.layout, new_origin(
        "bf", "2013-01-02", "2013-01-03", c.clock(), from_epoch=1, publish_at="2013-01-03",
        promote=True))
    day("2013-01-02", "k2", 20, lineage="bf", publish_on_complete=False)
    last = day("2013-01-03", "k3", 30, lineage="bf", promote=True)
    corrected = [("2013-01-01", "k1", 1), ("2013-01-02", "k2", 20), ("2013-01-03", "k3", 30)]
    assert rows_pyiceberg(spec, endpoint) == corrected
    assert rows_duckdb(spec, endpoint) == corrected
    assert _snapshots(spec, endpoint) == ["1", "2", "3", str(last.epoch_id)]
    day("2013-01-04", "k4", 4)  # main continues from the promoted state
    assert rows_pyiceberg(spec, endpoint) == corrected + [("2013-01-04", "k4", 4)]


def test_iceberg_declarations_need_a_name():
    with pytest.raises(ValueError, match="namespace.table"):
        TableSpec("file:///x", format="iceberg")
    assert TableSpec.from_json(TableSpec("file:///x", format="iceberg", name="a.b",
                                         catalog="c").to_json()).catalog == "c"


def test_a_spark_job_stages_an_iceberg_table(spark_connect, s3_server, s3_bucket, catalog_url,
                                             monkeypatch):
    """JobRun.write_table through Spark Connect on S3: the files keep the partition column
    (Iceberg reads its value from their statistics), one snapshot per epoch, and
    read_published reads the published snapshot back through Spark."""
    from checkpointing.storage.s3 import S3Storage

    monkeypatch.setenv("PYICEBERG_CATALOG__CKPT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__CKPT__URI", catalog_url)
    c = Coordinator(S3Storage(s3_bucket, "ckpt", endpoint_url=s3_server.endpoint), "p")
    spec = _spec(f"s3://{s3_bucket}/warehouse", "replace_partitions", ("day",))
    via_spark = spark_table_epochs(c, spec, spark_connect.url, s3_server.endpoint)
    expected = SPARK_EXPECTED
    assert rows_pyiceberg(spec, s3_server.endpoint) == expected
    assert rows_duckdb(spec, s3_server.endpoint) == expected
    assert via_spark == expected
    assert _snapshots(spec, s3_server.endpoint) == ["1", "2"]


def test_vacuum_keeps_the_snapshots_retained_epochs_and_savepoints_published(env, tmp_path):
    """PROTOCOL 6.13 for Iceberg: `ckpt tables vacuum` expires the snapshots of forgotten
    epochs and deletes the data files only they referenced; the savepoint's and the retained
    epoch's snapshots stay readable."""
    from dataclasses import replace

    from checkpointing import create_savepoint, delete_savepoint, open_storage
    from checkpointing.coordination.retention import run_retention
    from checkpointing.tables.cleanup import vacuum_tables

    c, wh, endpoint = env
    c.config = replace(c.config, retained_epochs=1)
    spec = _spec(wh, "replace_partitions", ("day",))

    def data_files() -> int:
        store = open_storage(spec.location, endpoint_url=endpoint)
        return len([o for o in store.list("") if o.key.endswith(".parquet")
                    and not o.key.startswith("metadata/")])

    _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 1, "d2")], "r1")
    create_savepoint(c, "before-fixes", 1)
    for n in (2, 3, 4):  # each epoch corrects day d2
        _epoch(c, tmp_path, spec, [("b", n, "d2")], f"r{n}")
    run_retention(c)
    snaps = {s.summary.get("ckpt.epoch_id"): s.snapshot_id
             for s in open_table(spec, endpoint).snapshots()}
    assert data_files() == 5
    done = vacuum_tables(c, min_retention_hours=0)
    assert [(v.output, v.kept_versions, v.files_deleted) for v in done] == [
        ("t", tuple(sorted((snaps["1"], snaps["4"]))), 2)]
    assert data_files() == 3
    t = open_table(spec, endpoint)
    assert t.snapshot_by_id(snaps["2"]) is None and t.snapshot_by_id(snaps["3"]) is None
    assert rows_pyiceberg(spec, endpoint, snaps["1"]) == [("d1", "a", 1), ("d2", "b", 1)]
    assert rows_pyiceberg(spec, endpoint) == [("d1", "a", 1), ("d2", "b", 4)]
    assert rows_duckdb(spec, endpoint) == [("d1", "a", 1), ("d2", "b", 4)]
    delete_savepoint(c.storage, c.layout, "before-fixes")
    assert vacuum_tables(c, min_retention_hours=0, dry_run=True)[0].files_deleted == 1
    assert data_files() == 3  # a dry run deletes nothing
    vacuum_tables(c, min_retention_hours=0)
    assert data_files() == 2
    assert rows_pyiceberg(spec, endpoint) == [("d1", "a", 1), ("d2", "b", 4)]


#: Run in a fresh process: a Spark session that never wrote the table, configured only by
#: the runtime from pyiceberg's environment (the catalog translated by lakehouse_conf).
_FRESH_SESSION_READ = """
import json, sys
from spark_jobs.runtime import spark_session
name, endpoint, versions = sys.argv[1], sys.argv[2] or None, json.loads(sys.argv[3])
spark = spark_session("fresh-reader", s3=bool(endpoint), endpoint_url=endpoint)
snaps = spark.sql(f"SELECT snapshot_id, summary['ckpt.epoch_id'] AS epoch, committed_at "
                  f"FROM ckpt.{name}.snapshots ORDER BY committed_at").collect()
out = {"snapshots": [[r.snapshot_id, r.epoch] for r in snaps],
       "history": spark.sql(f"SELECT count(*) AS n FROM ckpt.{name}.history").first().n,
       "by_version": {}, "by_time": {}}
for v in versions:
    q = f"SELECT day, key, value FROM ckpt.{name} VERSION AS OF {v}"
    out["by_version"][str(v)] = sorted([list(r) for r in spark.sql(q).collect()])
for r in snaps:
    q = (f"SELECT day, key, value FROM ckpt.{name} "
         f"TIMESTAMP AS OF '{r.committed_at.isoformat()}'")
    out["by_time"][str(r.snapshot_id)] = sorted([list(x) for x in spark.sql(q).collect()])
spark.stop()
print("RESULT " + json.dumps(out))
"""


def test_a_fresh_spark_session_reads_each_epoch_s_snapshot_by_catalog_name(env, tmp_path,
                                                                            monkeypatch):
    """One Iceberg catalog shared by the committer and Spark: a Spark session that never
    wrote the table names it ``ckpt.<namespace>.<table>``, its ``snapshots`` and
    ``history`` tables show one snapshot per completed epoch, and ``VERSION AS OF`` and
    ``TIMESTAMP AS OF`` each snapshot read what pyiceberg reads there. The catalog is a
    SQLite file on local storage and the tests' PostgreSQL on the S3 server."""
    import json
    import subprocess
    import sys

    c, wh, endpoint = env
    if endpoint is None:
        monkeypatch.setenv("PYICEBERG_CATALOG__CKPT__URI", f"sqlite:///{tmp_path}/catalog.db")
    spec = _spec(wh, "append")
    _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 2, "d1")], "r1")
    aborted = _epoch(c, tmp_path, spec, [("x", 9, "dX")], "r2", complete=False)
    c.abort(aborted.epoch_id, "declined", "bad rows")
    _epoch(c, tmp_path, spec, [("c", 3, "d2")], "r3")
    versions = [s.snapshot_id for s in open_table(spec, endpoint).snapshots()]
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH_SESSION_READ, spec.name, endpoint or "",
         json.dumps(versions)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        check=False,
        env=_without_connect_mode())
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out["snapshots"] == [[v, e] for v, e in zip(versions, ["1", "3"], strict=True)]
    assert out["history"] == len(versions)
    for v in versions:
        expected = [list(r) for r in rows_pyiceberg(spec, endpoint, v)]
        assert out["by_version"][str(v)] == expected
        assert out["by_time"][str(v)] == expected
    assert out["by_version"][str(versions[-1])] == [["d1", "a", 1], ["d1", "b", 2],
                                                    ["d2", "c", 3]]


def _without_connect_mode() -> dict[str, str]:
    """This process's environment for a child that starts a local Spark: a Connect session
    made here sets SPARK_CONNECT_MODE_ENABLED, which would make the child's builder insist
    on a remote."""
    return {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_MODE_ENABLED"}
