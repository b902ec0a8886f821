"""Table outputs of mode ``merge`` (PROTOCOL 6.12): an epoch's upserts and deletes by key are
one table commit carrying the epoch's transaction, exactly once through a commit step killed
after its table commit and racing commit steps; the table's history names the operation
(MERGE); the content equals a model kept by pandas/dicts; and a table input reading the
merged table's changes (6.14) sees each merge's rows removed and added, so content at the
older version minus the removed plus the added rows is the content at the newer one."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.harness.race import race
from checkpointing import Coordinator, LocalStorage, SnapshotWriter
from checkpointing.protocol.barrier import TaskPlan
from checkpointing.protocol.table_inputs import TableInput, TableVersion
from checkpointing.records.two_phase_publish import read_manifest
from checkpointing.storage import open_storage
from checkpointing.tables.changes import changes, pin
from checkpointing.tables.commit import commit_tables
from checkpointing.tables.delta import open_table
from checkpointing.tables.spec import DELETE_COLUMN, TableSpec, app_id
from tests.support.tables_readers import die_after_table_commit, rows_duckdb

PLAN = {"gold": TaskPlan((), True)}


@pytest.fixture
def env(backend, request, tmp_path):
    if backend == "local":
        return Coordinator(LocalStorage(tmp_path / "ckpt"), "p"), f"file://{tmp_path}/wh", None
    storage = request.getfixturevalue("s3_storage")
    server = request.getfixturevalue("s3_server")
    return Coordinator(storage, "p"), f"s3://{storage.bucket}/wh", server.endpoint


def merge_epoch(c, tmp, spec, upserts: dict[str, int], deletes: list[str], run: str,
                complete: bool = True):
    """One epoch whose task stages ``upserts`` (key -> value) and ``deletes`` (keys) as
    merge output ``t``: one Parquet file with the delete marker, as write_table stages."""
    b = c.begin_epoch(PLAN, run)
    c.register_attempt(b.epoch_id, "gold", 1)
    w = SnapshotWriter(c.storage, c.layout, b.epoch_id, "gold", 1,
                       previous=c.restore_handle(b.epoch_id, "gold"))
    keys = list(upserts) + deletes
    path = tmp / run / "part-0.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "key": pa.array(keys, pa.string()),
        "value": pa.array([upserts.get(k) for k in keys], pa.int64()),
        DELETE_COLUMN: pa.array([k in deletes for k in keys], pa.bool_())}), path)
    w.stage_table_output("t", spec, [path], rows=len(keys))
    c.acknowledge(b.epoch_id, "gold", 1, w.handle())
    return c.complete(b.epoch_id) if complete else b


def content(location, endpoint, version=None) -> dict[str, int]:
    df = open_table(location, endpoint, version).to_pandas()
    assert not df["key"].duplicated().any(), df
    return dict(zip(df["key"], df["value"], strict=True))


def rows_of(files, endpoint) -> Counter:
    """The (key, value) rows of a change set's data files, read by pyarrow."""
    out: Counter = Counter()
    for f in files:
        parent, name = f.uri.rsplit("/", 1)
        store = open_storage(parent, endpoint_url=endpoint)
        t = pq.read_table(io.BytesIO(store.read(name)[0]))
        out.update(zip(t.column("key").to_pylist(), t.column("value").to_pylist(),
                       strict=True))
    return out


EPOCHS = [({"a": 1, "b": 2, "c": 3}, []),          # inserts
          ({"b": 20, "d": 4}, ["a"]),              # an update, an insert, a delete
          ({}, ["c", "zz"]),                        # a delete, and a key never present
          ({"a": 100}, []),                         # a deleted key comes back
          ({None: 9, "e": 5}, []),                  # a NULL key is one key:
          ({None: 10}, []),                         # updated, not inserted again,
          ({}, [None])]                             # and deleted


def test_merge_epochs_upsert_and_delete_by_key_one_version_each(env, tmp_path):
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/silver", "merge", keys=("key",), change_data_feed=True)
    model: dict[str, int] = {}
    src = TableInput(spec.location)
    versions = []
    for n, (upserts, deletes) in enumerate(EPOCHS, 1):
        meta = merge_epoch(c, tmp_path, spec, upserts, deletes, f"r{n}")
        assert meta.completed
        model.update(upserts)
        for k in deletes:
            model.pop(k, None)
        assert content(spec.location, endpoint) == model, n
        versions.append(read_manifest(c.storage, c.layout).outputs["t"].meta["table_version"])
        if n > 1:  # a table input reads the merge as removed and added rows
            before, after = versions[-2], versions[-1]
            assert pin(src, endpoint) == TableVersion(after)
            ch = changes(src, TableVersion(before), TableVersion(after), endpoint)
            got = Counter(content(spec.location, endpoint, before).items())
            got.subtract(rows_of(ch.removed, endpoint))
            got.update(rows_of(ch.added, endpoint))
            assert +got == Counter(model.items()), n
    epochs = range(1, len(EPOCHS) + 1)
    assert versions == list(epochs)  # version 0 creates the table
    history = {int(h["version"]): h for h in open_table(spec.location, endpoint).history()}
    assert [history[v]["operation"] for v in versions] == ["MERGE"] * len(EPOCHS)
    assert [history[v]["ckpt.epoch_id"] for v in versions] == [str(e) for e in epochs]
    assert sorted(rows_duckdb(spec.location, endpoint), key=str) == \
        sorted(model.items(), key=str)
    props = open_table(spec.location, endpoint).metadata().configuration
    assert props.get("delta.enableChangeDataFeed") == "true"


def test_a_killed_or_raced_merge_commits_once(env, tmp_path):
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/silver", "merge", keys=("key",))
    merge_epoch(c, tmp_path, spec, {"a": 1, "b": 2}, [], "r1")
    b = merge_epoch(c, tmp_path, spec, {"a": 5}, ["b"], "r2", complete=False)
    die_after_table_commit(c, b.epoch_id, endpoint)
    assert content(spec.location, endpoint) == {"a": 5}
    assert Coordinator(c.storage, "p").complete(b.epoch_id).completed  # the retry
    assert open_table(spec.location, endpoint).version() == 2
    b = merge_epoch(c, tmp_path, spec, {"c": 7}, ["a"], "r3", complete=False)
    outputs = c.read_ack(c.layout.attempt_object(b.epoch_id, "gold", 1, "ack")) \
        .state_handle.outputs
    results, errors = race(lambda _: commit_tables("p", "main", b.epoch_id, outputs, endpoint)[
        "t"].meta["table_version"], 4)
    assert not errors and set(results) == {3}, (results, errors)
    assert open_table(spec.location, endpoint).version() == 3
    assert content(spec.location, endpoint) == {"c": 7}


# a merge whose rows are all new deletes nothing, as expected: no warning in the task's log
@pytest.mark.filterwarnings("error:Delete operation did not match any records")
def test_an_iceberg_merge_upserts_and_deletes_by_key(tmp_path, monkeypatch):
    from checkpointing.tables.iceberg import open_table as open_iceberg

    monkeypatch.setenv("PYICEBERG_CATALOG__M__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__M__URI", f"sqlite:///{tmp_path}/cat.db")
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    spec = TableSpec(f"file://{tmp_path}/wh/silver", "merge", keys=("key",),
                     format="iceberg", name="silver.t", catalog="m")
    model: dict[str, int] = {}
    for n, (upserts, deletes) in enumerate(EPOCHS, 1):
        assert merge_epoch(c, tmp_path, spec, upserts, deletes, f"r{n}").completed
        model.update(upserts)
        for k in deletes:
            model.pop(k, None)
        t = open_iceberg(spec).scan().to_arrow()
        assert dict(zip(t.column("key").to_pylist(), t.column("value").to_pylist(),
                        strict=True)) == model, n
        assert t.num_rows == len(model)
    # a commit step run again commits nothing: the newest snapshot already holds the epoch
    table = open_iceberg(spec)
    snap = table.current_snapshot().snapshot_id
    last = len(EPOCHS)
    outputs = c.completed_handles(last)["gold"].outputs
    assert commit_tables("p", "main", last, outputs)["t"].meta["table_version"] == snap
    assert open_iceberg(spec).current_snapshot().snapshot_id == snap


def test_a_merge_that_changes_no_key_is_recorded_at_the_version_holding_it(env, tmp_path):
    """An epoch that stages no row, and one whose rows change nothing (the delete of a key
    the table never had, an upsert of the value it holds): each is one version carrying
    its transaction (delta-rs commits nothing for such a merge), and that is the version
    the manifest reports."""
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/silver", "merge", keys=("key",))
    app = app_id("p", "main", "t")
    for n, (upserts, deletes) in enumerate([({"a": 1}, []), ({}, []), ({}, ["zz"]),
                                            ({"a": 1}, []), ({"b": 2}, [])], 1):
        merge_epoch(c, tmp_path, spec, upserts, deletes, f"r{n}")
        reported = read_manifest(c.storage, c.layout).outputs["t"].meta["table_version"]
        dt = open_table(spec.location, endpoint)
        assert dt.version() == reported, n  # one version per epoch, the newest this one
        assert dt.transaction_version(app) == n
        assert open_table(spec.location, endpoint, reported - 1).transaction_version(app) \
            == (n - 1 if n > 1 else None), n
    assert content(spec.location, endpoint) == {"a": 1, "b": 2}


def _staged_dirs(location: str) -> list[str]:
    root = Path(location.removeprefix("file://"))
    return sorted(p.name for p in root.iterdir() if p.name.startswith("ckpt-"))


def _parquet_files(location: str) -> set[str]:
    root = Path(location.removeprefix("file://"))
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")
            if not p.relative_to(root).parts[0].startswith(("_", "."))}


def test_no_staged_file_outlives_its_epoch_unless_a_table_references_it(tmp_path):
    """Ten epochs of a merge output and of an append output, one aborted, one whose first
    attempt failed after staging: after retention the merge table holds no staged
    directory (its commits rewrote the rows), the append table those of its committed
    epochs only; VACUUM's dry run accounts for every file no version references."""
    from checkpointing import run_retention
    from checkpointing.tables.cleanup import vacuum_tables

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    merge = TableSpec(f"file://{tmp_path}/wh/silver", "merge", keys=("key",))
    facts = TableSpec(f"file://{tmp_path}/wh/facts", "append")
    plan = {"gold": TaskPlan((), True)}
    for n in range(1, 11):
        b = c.begin_epoch(plan, f"r{n}")
        attempts = (1, 2) if n == 7 else (1,)  # the first attempt fails after staging
        for attempt in attempts:
            c.register_attempt(b.epoch_id, "gold", attempt)
            w = SnapshotWriter(c.storage, c.layout, b.epoch_id, "gold", attempt,
                               previous=c.restore_handle(b.epoch_id, "gold"))
            path = tmp_path / f"r{n}-a{attempt}" / "part-0.parquet"
            path.parent.mkdir(parents=True)
            pq.write_table(pa.table({"key": [f"k{n % 4}"], "value": [n],
                                     DELETE_COLUMN: [False]}), path)
            w.stage_table_output("m", merge, [path], rows=1)
            w.stage_table_output("f", facts, [path], rows=1)
        c.acknowledge(b.epoch_id, "gold", attempts[-1], w.handle())
        if n == 5:
            c.abort(b.epoch_id, "declined", "bad rows")
        else:
            assert c.complete(b.epoch_id).completed
        run_retention(c)
    assert _staged_dirs(merge.location) == []
    committed = [n for n in range(1, 11) if n != 5]
    assert _staged_dirs(facts.location) == [
        f"ckpt-p-e{n:010d}-gold-a{2 if n == 7 else 1:04d}" for n in committed]
    assert content(merge.location, None) == {"k1": 9, "k2": 10, "k3": 7, "k0": 8}
    # VACUUM: the merge's rewritten files are unreferenced but recent (kept by default,
    # counted); with no threshold, exactly those go, and every file left is the table's.
    live = {a["path"] for a in pa.table(open_table(merge.location)
                                         .get_add_actions(flatten=True)).to_pylist()}
    unreferenced = _parquet_files(merge.location) - live
    assert unreferenced
    (m, f) = sorted(vacuum_tables(c, dry_run=True), key=lambda v: v.output)[::-1]
    assert (m.output, m.files_deleted, m.recent_kept) == ("m", 0, len(unreferenced))
    assert "younger than 168 h kept" in m.describe()
    assert f.files_deleted == f.recent_kept == 0
    [m] = [v for v in vacuum_tables(c, min_retention_hours=0, dry_run=True) if v.output == "m"]
    assert m.files_deleted == len(unreferenced)
    vacuum_tables(c, min_retention_hours=0)
    assert _parquet_files(merge.location) == live


@pytest.mark.parametrize("backend", ["local"])
def test_a_merge_by_two_keys_one_of_them_null_updates_in_place(env, tmp_path):
    """Keys of several columns, one of them NULL in some rows (a GROUP BY over a column
    with NULLs): each epoch's upsert replaces its row, and a delete removes it."""
    c, wh, endpoint = env
    spec = TableSpec(f"{wh}/pairs", "merge", keys=("a", "b"))
    epochs = [([("x", None, 1), ("x", "y", 2)], []), ([("x", None, 3)], []),
              ([("z", None, 4)], [("x", "y")]), ([], [("x", None)])]
    model: dict[tuple, int] = {}
    for n, (upserts, deletes) in enumerate(epochs, 1):
        b = c.begin_epoch(PLAN, f"p{n}")
        c.register_attempt(b.epoch_id, "gold", 1)
        w = SnapshotWriter(c.storage, c.layout, b.epoch_id, "gold", 1,
                           previous=c.restore_handle(b.epoch_id, "gold"))
        rows = [(a, bb, v, False) for a, bb, v in upserts] + \
            [(a, bb, None, True) for a, bb in deletes]
        path = tmp_path / f"p{n}" / "part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({
            "a": pa.array([r[0] for r in rows], pa.string()),
            "b": pa.array([r[1] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
            DELETE_COLUMN: pa.array([r[3] for r in rows], pa.bool_())}), path)
        w.stage_table_output("t", spec, [path], rows=len(rows))
        c.acknowledge(b.epoch_id, "gold", 1, w.handle())
        assert c.complete(b.epoch_id).completed
        model.update({(a, bb): v for a, bb, v in upserts})
        for k in deletes:
            model.pop(k, None)
        df = open_table(spec.location, endpoint).to_pandas()
        got = sorted((((r.a, None if r.b != r.b else r.b), int(r.v))
                      for r in df.itertuples(index=False)), key=str)
        assert got == sorted(model.items(), key=str), n
        assert len(df) == len(model), n
