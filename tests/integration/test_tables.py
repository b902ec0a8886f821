"""Table outputs (PROTOCOL 6.12): a completed epoch is one Delta commit per output, exactly
once, read by engines this project did not write (delta-rs and DuckDB's delta extension),
on the filesystem and on the S3 server. The expected rows are computed here from what each
epoch staged, independently of the table."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote

import pytest

from bench.harness.race import race
from checkpointing import Coordinator
from checkpointing.records.two_phase_publish import published_tables, read_manifest
from checkpointing.tables.commit import commit_tables
from checkpointing.tables.delta import open_table
from checkpointing.tables.spec import TableSpec, app_id
from tests.support.tables_readers import (
    SPARK_EXPECTED,
    die_after_table_commit,
    rows_deltalake,
    rows_duckdb,
    spark_table_epochs,
    table_epoch,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["local", "s3"])
def env(request, tmp_path):
    """(coordinator, table location root, S3 endpoint or None)."""
    if request.param == "local":
        from checkpointing import LocalStorage

        return Coordinator(LocalStorage(tmp_path / "ckpt"), "p"), f"file://{tmp_path}/wh", None
    storage = request.getfixturevalue("s3_storage")
    server = request.getfixturevalue("s3_server")
    return (Coordinator(storage, "p"), f"s3://{storage.bucket}/warehouse", server.endpoint)


_epoch = table_epoch


def _versions(location: str, endpoint: str | None) -> dict[int, str]:
    """Table version -> the epoch it holds (from each commit's metadata)."""
    from deltalake import DeltaTable

    from checkpointing.tables.delta import storage_options, table_path

    dt = DeltaTable(table_path(location), storage_options=storage_options(location, endpoint))
    return {int(h["version"]): h.get("ckpt.epoch_id") for h in dt.history()}


def test_append_table_one_version_per_completed_epoch(env, tmp_path):
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/facts", "append")
    batches = {1: [("a", 1, "d1"), ("b", 2, "d1")], 2: [("c", 3, "d2")], 4: [("d", 4, "d3")]}
    _epoch(c, tmp_path, spec, batches[1], "r1")
    _epoch(c, tmp_path, spec, batches[2], "r2")
    aborted = _epoch(c, tmp_path, spec, [("x", 99, "dX")], "r3", complete=False)
    c.abort(aborted.epoch_id, "declined", "bad rows")
    meta = _epoch(c, tmp_path, spec, batches[4], "r4")
    expected = sorted((d, k, v) for rows in batches.values() for k, v, d in rows)
    assert rows_deltalake(spec.location, endpoint) == expected
    assert rows_duckdb(spec.location, endpoint) == expected
    # version 0 creates the table; then one version per completed epoch, none for epoch 3
    assert _versions(spec.location, endpoint) == {0: None, 1: "1", 2: "2", 3: "4"}
    manifest = read_manifest(c.storage, c.layout)
    assert manifest.epoch_id == meta.epoch_id == 4
    assert manifest.outputs["t"].meta["table_version"] == 3
    assert manifest.outputs["t"].meta["table"]["location"] == spec.location
    # "epoch 2: t v2": what each epoch published, from the manifest's history
    assert [published_tables(manifest, e) for e in (1, 2, 3, 4)] == [
        {"t": 1}, {"t": 2}, {}, {"t": 3}]


def test_overwrite_table_and_time_travel_by_epoch(env, tmp_path):
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/totals", "overwrite")
    totals: dict[str, int] = {}
    published = {}
    for n, batch in enumerate([[("a", 1), ("b", 2)], [("a", 5)], [("c", 1), ("b", 1)]], 1):
        for k, v in batch:
            totals[k] = totals.get(k, 0) + v
        rows = [(k, v, "all") for k, v in sorted(totals.items())]
        _epoch(c, tmp_path, spec, rows, f"r{n}")
        published[n] = (read_manifest(c.storage, c.layout).outputs["t"].meta["table_version"],
                        sorted(("all", k, v) for k, v in totals.items()))
    assert rows_deltalake(spec.location, endpoint) == published[3][1]
    assert rows_duckdb(spec.location, endpoint) == published[3][1]
    for n, (version, expected) in published.items():  # the table as of epoch n
        assert rows_deltalake(spec.location, endpoint, version=version) == expected, n


def test_an_overwrite_that_grows_keeps_the_table_s_files_and_commits_only_its_own(
        env, tmp_path):
    """PROTOCOL 1.26: an overwrite epoch that only adds rows stages them and lists the
    previous epoch's files by reference; its commit adds its file and removes none, the
    table holds both epochs' rows, and a backfill promoting a grown epoch replaces what
    the backfill recomputed. A growth with nothing to grow from, or of another mode, is
    refused before anything is staged."""
    from checkpointing.records.backfill_lineages import new_origin, record_origin

    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/rows", "overwrite")
    _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 2, "d1")], "r1")
    first = set(open_table(spec.location, endpoint).file_uris())
    _epoch(c, tmp_path, spec, [("c", 3, "d2")], "r2", grows=True)
    second = set(open_table(spec.location, endpoint).file_uris())
    assert first < second and len(second - first) == 1
    expected = [("d1", "a", 1), ("d1", "b", 2), ("d2", "c", 3)]
    assert rows_deltalake(spec.location, endpoint) == expected
    assert rows_duckdb(spec.location, endpoint) == expected
    # a backfill from epoch 1 whose grown epoch adds another row: promoted, the table is
    # epoch 1's rows and the backfill's, epoch 2's row gone, in one commit
    record_origin(c.storage, c.layout, new_origin(
        "bf", "d2", "d2", c.clock(), from_epoch=1, publish_at="d2", promote=True))
    _epoch(c, tmp_path, spec, [("z", 9, "d2")], "bf-d2", grows=True, lineage="bf",
           data_interval={"start": "d2", "end": "d2"}, promote=True)
    assert rows_deltalake(spec.location, endpoint) == [("d1", "a", 1), ("d1", "b", 2),
                                                       ("d2", "z", 9)]
    for bad, why in ((TableSpec(f"{wh}/fresh", "overwrite"), "restored epoch's output"),
                     (TableSpec(f"{wh}/facts", "append"), "needs mode overwrite")):
        with pytest.raises(ValueError, match=why):  # a pipeline of its own: none before
            _epoch(Coordinator(c.storage, f"p-{bad.mode}"), tmp_path, bad, [("q", 1, "d9")],
                   "r1", grows=True)


def test_replace_partitions_keeps_the_other_partitions(env, tmp_path):
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/by_day", "replace_partitions", ("day",))
    _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 1, "d2")], "r1")
    # epoch 2 corrects day d2 and adds d3; d1 stays as epoch 1 wrote it
    _epoch(c, tmp_path, spec, [("b", 7, "d2"), ("c", 3, "d3")], "r2")
    expected = [("d1", "a", 1), ("d2", "b", 7), ("d3", "c", 3)]
    assert rows_deltalake(spec.location, endpoint) == expected
    assert rows_duckdb(spec.location, endpoint) == expected


def test_a_commit_step_killed_after_the_table_commit_commits_nothing_twice(env, tmp_path):
    """SIGKILL-equivalent: the deciding process exits right after the table commit, before
    the manifest; the next commit step (recovery) finds the epoch's transaction and only
    writes the manifest."""
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/facts", "append")
    _epoch(c, tmp_path, spec, [("a", 1, "d1")], "r1")
    b = _epoch(c, tmp_path, spec, [("b", 2, "d2")], "r2", complete=False)
    die_after_table_commit(c, b.epoch_id, endpoint)
    assert _versions(spec.location, endpoint) == {0: None, 1: "1", 2: "2"}
    assert read_manifest(c.storage, c.layout).epoch_id == 1  # not published yet
    meta = Coordinator(c.storage, "p").complete(b.epoch_id)  # the commit step's retry
    assert meta.completed
    assert _versions(spec.location, endpoint) == {0: None, 1: "1", 2: "2"}
    assert read_manifest(c.storage, c.layout).outputs["t"].meta["table_version"] == 2
    assert rows_deltalake(spec.location, endpoint) == [("d1", "a", 1), ("d2", "b", 2)]


def test_racing_commit_steps_make_one_version(env, tmp_path):
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/raced", "append")  # the table does not exist yet: creation races
    b = _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 2, "d1")], "r1", complete=False)
    outputs = c.read_ack(c.layout.attempt_object(b.epoch_id, "gold", 1, "ack")) \
        .state_handle.outputs
    results, errors = race(lambda _: commit_tables("p", "main", b.epoch_id, outputs, endpoint)[
        "t"].meta["table_version"], 6)
    assert not errors, errors
    versions = _versions(spec.location, endpoint)
    assert sorted(e for e in versions.values() if e) == [str(b.epoch_id)], versions
    assert [v for v, e in versions.items() if e is None] == [0], versions  # one CREATE
    assert set(results) == {max(versions)}
    assert rows_deltalake(spec.location, endpoint) == [("d1", "a", 1), ("d1", "b", 2)]
    from deltalake import DeltaTable

    from checkpointing.tables.delta import storage_options, table_path

    dt = DeltaTable(table_path(spec.location),
                    storage_options=storage_options(spec.location, endpoint))
    assert dt.transaction_version(app_id("p", "main", "t")) == b.epoch_id


def test_bad_table_declarations_are_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        TableSpec("file:///x", "upsert")
    with pytest.raises(ValueError, match="needs partition_by"):
        TableSpec("file:///x", "replace_partitions")
    with pytest.raises(ValueError, match="without a trailing"):
        TableSpec("file:///x/", "append")
    with pytest.raises(ValueError, match="format must be one of"):
        TableSpec("file:///x", format="hudi")


def test_a_spark_job_stages_a_table_that_its_epoch_commits(spark_connect, s3_server, s3_bucket):
    """JobRun.write_table through Spark Connect on S3: Spark writes the partitioned Parquet
    into the table's location, the epoch's completion commits it, one version per epoch."""
    from checkpointing.storage.s3 import S3Storage

    c = Coordinator(S3Storage(s3_bucket, "ckpt", endpoint_url=s3_server.endpoint), "p")
    spec = TableSpec(f"s3://{s3_bucket}/warehouse/by_day", "replace_partitions", ("day",))
    # Spark reads the published version: d1's file staged by epoch 1, d2's and d3's by
    # epoch 2, in different directories; the partition column comes from each.
    via_spark = spark_table_epochs(c, spec, spark_connect.url, s3_server.endpoint)
    expected = SPARK_EXPECTED
    assert via_spark == expected
    assert rows_deltalake(spec.location, s3_server.endpoint) == expected
    assert rows_duckdb(spec.location, s3_server.endpoint) == expected
    assert _versions(spec.location, s3_server.endpoint) == {0: None, 1: "1", 2: "2"}


def test_vacuum_keeps_the_versions_retained_epochs_and_savepoints_published(env, tmp_path):
    """PROTOCOL 6.13: checkpoint retention never deletes table files; the table's VACUUM
    (``ckpt tables vacuum``) keeps the versions of retained epochs and savepoints, and
    deletes the files only versions of forgotten epochs referenced."""
    from dataclasses import replace

    from checkpointing import create_savepoint, delete_savepoint
    from checkpointing.coordination.retention import run_retention
    from checkpointing.tables.cleanup import vacuum_tables

    c, wh, endpoint = env
    c.config = replace(c.config, retained_epochs=1)
    spec = TableSpec(f"{wh}/by_day", "replace_partitions", ("day",))
    first = [("d1", "a", 1), ("d2", "b", 1)]
    _epoch(c, tmp_path, spec, [(k, v, d) for d, k, v in first], "r1")
    create_savepoint(c, "before-fixes", 1)
    for n in (2, 3, 4):  # each epoch corrects day d2: its commit removes the previous file
        _epoch(c, tmp_path, spec, [("b", n, "d2")], f"r{n}")
    run_retention(c)
    assert c.epoch_ids() == [4]
    versions = {e: v for v, e in _versions(spec.location, endpoint).items() if e}
    assert versions == {"1": 1, "2": 2, "3": 3, "4": 4}
    # Retention deleted epochs 2-3 but no table file: every version still reads.
    assert rows_deltalake(spec.location, endpoint, version=2) == [("d1", "a", 1), ("d2", "b", 2)]

    assert len(_data_files(spec.location, endpoint)) == 5  # d1, d2 x4
    done = vacuum_tables(c, min_retention_hours=0)
    assert [(v.output, v.kept_versions, v.files_deleted) for v in done] == [("t", (1, 4), 2)]
    assert len(_data_files(spec.location, endpoint)) == 3
    # The savepoint's version and the latest epoch's still read; epochs 2-3's do not.
    assert rows_deltalake(spec.location, endpoint, version=1) == first
    assert rows_deltalake(spec.location, endpoint) == [("d1", "a", 1), ("d2", "b", 4)]
    assert rows_duckdb(spec.location, endpoint) == [("d1", "a", 1), ("d2", "b", 4)]
    with pytest.raises(Exception):  # noqa: B017 - delta-rs's error for a missing file
        rows_deltalake(spec.location, endpoint, version=2)

    delete_savepoint(c.storage, c.layout, "before-fixes")
    vacuum_tables(c, min_retention_hours=0, dry_run=True)
    assert len(_data_files(spec.location, endpoint)) == 3  # a dry run deletes nothing
    # The same through the shell: ckpt tables vacuum.
    argv = [sys.executable, "-m", "checkpointing.ckpt", "--storage",
            c.storage.uri("").rstrip("/"), "--pipeline", "p"]
    argv += ["--endpoint-url", endpoint] if endpoint else []
    r = subprocess.run(argv + ["tables", "vacuum", "--min-retention-hours", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "t: deleted 1 file(s); versions kept for retained epochs and " \
        "savepoints: v4", r.stdout
    assert len(_data_files(spec.location, endpoint)) == 2  # epoch 1's d2 file went
    assert rows_deltalake(spec.location, endpoint) == [("d1", "a", 1), ("d2", "b", 4)]


def _data_files(location: str, endpoint: str | None) -> list[str]:
    from checkpointing import open_storage

    store = open_storage(location, endpoint_url=endpoint)
    return [o.key for o in store.list("") if o.key.endswith(".parquet")
            and not o.key.startswith("_delta_log/")]


def test_backfill_promotion_is_one_commit_readers_never_see_a_mix(env, tmp_path):
    """A backfill from epoch 1 with a corrected job replays days 2-3; only its last epoch
    publishes, and it is promoted: one table commit replaces what it recomputed (the
    difference between main's table and the backfill's), while a reader polling the table
    sees main's state or the corrected one, never a mix; main then continues from it."""
    from checkpointing.records.backfill_lineages import new_origin, record_origin

    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/by_day", "replace_partitions", ("day",))

    def day(d: str, k: str, v: int, **kw):
        return _epoch(c, tmp_path, spec, [(k, v, d)], f"{kw.get('lineage', 'main')}-{d}",
                      data_interval={"start": d, "end": d}, **kw)

    for n, d in enumerate(("2013-01-01", "2013-01-02", "2013-01-03"), 1):
        day(d, f"k{n}", n)
    before = rows_deltalake(spec.location, endpoint)
    corrected = [("2013-01-01", "k1", 1), ("2013-01-02", "k2", 20), ("2013-01-03", "k3", 30)]
    seen, stop = set(), threading.Event()

    polled = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            seen.add(tuple(rows_deltalake(spec.location, endpoint)))
            polled.set()

    reader = threading.Thread(target=poll)
    reader.start()
    assert polled.wait(30)
    try:
        record_origin(c.storage, c.layout, new_origin(
            "bf", "2013-01-02", "2013-01-03", c.clock(), from_epoch=1,
            publish_at="2013-01-03", promote=True))
        day("2013-01-02", "k2", 20, lineage="bf", publish_on_complete=False)
        assert rows_deltalake(spec.location, endpoint) == before  # nothing published yet
        last = day("2013-01-03", "k3", 30, lineage="bf", promote=True)
    finally:
        stop.set()
        reader.join()
    assert rows_deltalake(spec.location, endpoint) == corrected
    assert tuple(before) in seen and seen <= {tuple(before), tuple(corrected)}, seen
    versions = _versions(spec.location, endpoint)
    assert sorted(int(e) for e in versions.values() if e) == [1, 2, 3, last.epoch_id]
    dt = open_table(spec.location, endpoint)
    assert dt.transaction_version(app_id("p", "bf", "t")) == last.epoch_id
    # The promotion's commit replaced days 2 and 3 (two files out, two in); day 1's file,
    # committed by epoch 1 and kept by reference, was not rewritten.
    v_last = {e: v for v, e in versions.items()}[str(last.epoch_id)]
    main_files = set(open_table(spec.location, endpoint, v_last - 1).file_uris())
    promoted = set(dt.file_uris())
    assert len(main_files - promoted) == len(promoted - main_files) == 2
    assert [f for f in promoted & main_files if "day=2013-01-01" in f]
    # Main continues from the promoted state.
    assert c.latest_completed("main") == last.epoch_id
    day("2013-01-04", "k4", 4)
    assert rows_deltalake(spec.location, endpoint) == corrected + [("2013-01-04", "k4", 4)]
    assert rows_duckdb(spec.location, endpoint) == corrected + [("2013-01-04", "k4", 4)]


def test_a_file_a_foreign_vacuum_deleted_is_never_committed(env, tmp_path):
    """6.13: an output that keeps a file the table no longer references (a backfill from
    an old epoch) is refused in one line when a cleanup ignoring the retained epochs
    deleted that file, instead of a table version naming a missing file."""
    from checkpointing import open_storage
    from checkpointing.tables.spec import TableCommitError

    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/by_day", "replace_partitions", ("day",))
    _epoch(c, tmp_path, spec, [("a", 1, "d1"), ("b", 1, "d2")], "r1")
    _epoch(c, tmp_path, spec, [("b", 2, "d2")], "r2")
    first = c.completed_handles(1)["gold"].outputs
    old_d2 = next(f for f in first["t"].files if "day=d2" in unquote(f.uri))
    store = open_storage(spec.location, endpoint_url=endpoint)
    store.delete(store.key_for_uri(old_d2.uri))  # what a plain VACUUM would have done
    with pytest.raises(TableCommitError, match="keeps 1 file"):
        commit_tables("p", "bf", 99, first, endpoint)  # epoch 1's content, committed again
    assert rows_deltalake(spec.location, endpoint) == [("d1", "a", 1), ("d2", "b", 2)]


def test_an_output_partitioned_otherwise_than_its_table_is_refused(env, tmp_path):
    """Delta would commit an unpartitioned output's files under the table's partition
    columns, whose values readers would then see null: refused in one line, the table as
    it was."""
    from checkpointing.tables.spec import TableCommitError

    c, wh, endpoint = env
    by_day = TableSpec(f"{wh}/by_day", "replace_partitions", ("day",))
    _epoch(c, tmp_path, by_day, [("a", 1, "d1"), ("b", 1, "d2")], "r1")
    refused = r"partitioned by \['day'\], its output by nothing"
    with pytest.raises(TableCommitError, match=refused):
        _epoch(c, tmp_path, TableSpec(by_day.location, "overwrite"), [("c", 3, "d3")], "r2")
    # The epoch is decided; its publish step, run again, refuses again.
    assert c.latest_completed() == 2
    with pytest.raises(TableCommitError, match=refused):
        commit_tables("p", "r2", 2, c.completed_handles(2)["gold"].outputs, endpoint)
    assert rows_deltalake(by_day.location, endpoint) == [("d1", "a", 1), ("d2", "b", 1)]


def _txn_version(location: str, endpoint: str | None, app: str, epoch_id: int) -> int:
    """The one version of the table's log whose transaction is ``epoch_id``'s (read from
    each version's ``txn``, not from what this library reported)."""
    latest = open_table(location, endpoint).version()
    holding = [v for v in range(latest + 1)
               if open_table(location, endpoint, v).transaction_version(app) == epoch_id
               and (v == 0 or open_table(location, endpoint, v - 1)
                    .transaction_version(app) != epoch_id)]
    assert len(holding) == 1, holding
    return holding[0]


@pytest.mark.parametrize("mode", ["append", "overwrite", "replace_partitions"])
def test_an_epoch_with_nothing_to_write_is_recorded_at_the_version_holding_it(
        env, tmp_path, mode, capsys):
    """Every completed epoch is one version carrying its transaction, also when it writes
    no row (an append of nothing, an overwrite with what is there, no partition replaced);
    the version reported (manifest, ``ckpt show --json``) is the one the log holds it in."""
    from checkpointing.ckpt import run as ckpt

    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/{mode}", mode, ("day",) if mode == "replace_partitions" else ())
    rows = [("a", 1, "d1"), ("b", 2, "d1")]
    _epoch(c, tmp_path, spec, rows, "r1")
    for run in ("r2", "r3"):  # an overwrite's nothing new is what the table holds
        _epoch(c, tmp_path, spec, rows if mode == "overwrite" else [], run)
    app = app_id("p", "main", "t")
    manifest = read_manifest(c.storage, c.layout)
    for epoch in (1, 2, 3):
        version = _txn_version(spec.location, endpoint, app, epoch)
        assert published_tables(manifest, epoch) == {"t": version}, epoch
        argv = ["--storage", c.storage.uri(""), "--pipeline", "p", "show", str(epoch),
                "--json"]
        if endpoint:
            argv[:0] = ["--endpoint-url", endpoint]
        assert ckpt(argv) == 0
        assert json.loads(capsys.readouterr().out)["tables"] == {"t": version}, epoch
    assert sorted(rows_deltalake(spec.location, endpoint)) == sorted(
        (d, k, v) for k, v, d in rows)
