"""Table inputs over histories written by delta-rs (a Python writer, copy-on-write: no
deletion vectors): Hypothesis draws appends, overwrites, DELETE, UPDATE, MERGE, compaction,
RESTORE, VACUUM and an added column, zero to four commits an epoch, and after every epoch
the rows kept from the change sets equal delta-rs's own read of the pinned version. A
retry reads the pinned range again after the upstream moved on; a run with checkpointing
disabled in between reads through the barrier made for its task and leaves the checked
line alone. A refusal is one line without a path; the task then starts afresh from the
table's content (its way forward).
The same property for tables delta-spark writes, with deletion vectors and column mapping,
is tests/integration/test_delta_histories.py."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from checkpointing.protocol.table_inputs import TableInput, TableInputError, TableVersion
from checkpointing.tables.changes import changes, pin
from tests.support.change_rows import arrow_counts, histories, history_settings, signed_rows

EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "25"))
READ = ["id", "p", "v"]
OPS = ["append", "append", "overwrite_p", "delete", "update", "merge", "compact", "restore",
       "vacuum", "add_column"]


def _rows(lo: int, hi: int, extra: bool) -> pa.Table:
    ids = list(range(lo, hi))
    cols = {"id": pa.array(ids, pa.int64()), "p": pa.array([f"p{i % 3}" for i in ids]),
            "v": pa.array([i * 3 for i in ids], pa.int64())}
    if extra:
        cols["extra"] = pa.array(["x"] * len(ids))
    return pa.table(cols)


def _apply(path: str, op: str, n: int, state: dict) -> None:
    dt = DeltaTable(path)
    extra = "extra" in [f.name for f in dt.schema().fields]
    if op == "append":
        lo = state["next"]
        state["next"] += 20 + 5 * n
        write_deltalake(path, _rows(lo, state["next"], extra), mode="append")
    elif op == "overwrite_p":  # replace one partition's rows
        lo = state["next"]
        state["next"] += 10
        rows = _rows(lo, state["next"], extra)
        rows = rows.set_column(1, "p", pa.array(["p1"] * rows.num_rows))
        write_deltalake(path, rows, mode="overwrite", predicate="p = 'p1'")
    elif op == "delete":
        dt.delete(f"id % 7 = {n}")
    elif op == "update":
        dt.update(updates={"v": "v + 1"}, predicate=f"id % 5 = {n % 5}")
    elif op == "merge":
        lo = max(0, state["next"] - 15)
        state["next"] += 5
        src = _rows(lo, state["next"], extra)
        (dt.merge(src, "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update(updates={"v": "s.v + 100"})
         .when_not_matched_insert_all().execute())
    elif op == "compact":
        dt.optimize.compact()
    elif op == "restore" and dt.version() > 0:
        try:
            dt.restore(max(0, dt.version() - 1 - n))
        except Exception as exc:  # noqa: BLE001 - a version VACUUM emptied: delta-rs refuses
            if "not found" not in str(exc).lower() and "missing" not in str(exc).lower():
                raise
    elif op == "vacuum":
        dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    elif op == "add_column" and not extra:
        lo = state["next"]
        state["next"] += 5
        write_deltalake(path, _rows(lo, state["next"], True), mode="append",
                        schema_mode="merge")


def _content(path: str, version: int) -> Counter:
    t = DeltaTable(path, version=version).to_pyarrow_table(columns=READ)
    return arrow_counts(t, READ)


@history_settings(EXAMPLES)
@given(epochs=histories(OPS, 6),
       partitioned=st.booleans(), retry_after=st.lists(st.booleans(), min_size=1,
                                                       max_size=3),
       unchecked_after=st.lists(st.booleans(), min_size=1, max_size=3))
def test_change_sets_of_delta_rs_histories_sum_to_the_content(tmp_path_factory, epochs,
                                                               partitioned, retry_after,
                                                               unchecked_after):
    """Runs with checkpointing disabled come in between (``unchecked_after``): each reads
    through the barrier made for its task (pinned when it starts, after one more upstream
    commit) from the version the checked line consumed; its rows on top of the kept ones
    equal the content at its own pin, and the checked line is left where it was."""
    from checkpointing import Coordinator, LocalStorage

    root = tmp_path_factory.mktemp("delta-rs")
    coordinator = Coordinator(LocalStorage(root / "ckpt"), "down")
    path = str(root / "t")
    write_deltalake(path, _rows(0, 30, False), partition_by=["p"] if partitioned else None)
    state = {"next": 30}
    spec = TableInput(f"file://{path}")
    kept: Counter = Counter()
    start: TableVersion | None = None
    for i, ops in enumerate(epochs):
        for op, n in ops:
            _apply(path, op, n, state)
        end = pin(spec)
        if retry_after[i % len(retry_after)]:  # the upstream moves before the rerun
            _apply(path, "append", i, state)
        try:
            found = changes(spec, start, end)
        except TableInputError as exc:
            assert "\n" not in str(exc) and path not in str(exc), exc
            found, kept = changes(spec, None, end), Counter()  # start afresh
        kept.update(signed_rows(found, READ))
        kept = +kept
        want = _content(path, end.version)
        assert kept == want, (i, end.version, ops, len(kept - want), len(want - kept))
        start = end
        if unchecked_after[i % len(unchecked_after)]:
            _unchecked_read(coordinator, spec, start, kept, path, state)


def _unchecked_read(coordinator, spec: TableInput, start: TableVersion | None,
                    kept: Counter, path: str, state: dict) -> None:
    from spark_jobs.runtime.errors import DeclineEpoch
    from spark_jobs.runtime.unchecked import unchecked_barrier

    _apply(path, "append", 1, state)  # committed after the checked epoch's pin
    barrier = unchecked_barrier(coordinator, "manual__off", "agg", 1, None, None,
                                {"src": spec})
    end = barrier.table_version("src")
    assert end is not None and end == pin(spec)
    try:
        rows = Counter(kept)
        rows.update(signed_rows(changes(spec, start, end), READ))
    except (TableInputError, DeclineEpoch):
        rows = Counter(signed_rows(changes(spec, None, end), READ))
    assert +rows == _content(path, end.version), (end.version, start)
    assert coordinator.epoch_ids() == []  # nothing written for the checked line


def test_files_appended_compacted_and_vacuumed_before_the_read_are_refused_in_one_line(
        tmp_path):
    """Files appended after the parent's version, then compacted and vacuumed before the
    epoch reads them: their rows are gone from storage; one line with the way forward, not
    a raw PATH_NOT_FOUND with the path."""
    import pytest

    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0, 30, False))
    spec = TableInput(f"file://{path}")
    start = pin(spec)
    state = {"next": 30}
    for op in ("append", "append", "compact", "vacuum"):
        _apply(path, op, 0, state)
    with pytest.raises(TableInputError) as refused:
        changes(spec, start, pin(spec))
    text = str(refused.value)
    assert "\n" not in text and path not in text and "VACUUM" in text, text
    assert "start its state afresh" in text
