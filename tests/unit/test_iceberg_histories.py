"""Table inputs over histories of an Iceberg table pyiceberg writes (copy-on-write):
Hypothesis draws appends, partition overwrites, deletes, schema changes (a column added,
renamed, dropped, and added again under a name it had: a new field id) and snapshot
expiry, zero to four commits an epoch, and after every epoch the rows kept from the change
sets equal pyiceberg's own scan of the pinned snapshot; each change set, over every column
of the pinned schema, equals the scan at its end less the scan at its start, whose columns
are matched to the end's by field id. A retry reads the pinned range
again after the upstream moved on. A refusal is one line without a path; the task then
starts afresh from the table's content."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from checkpointing.protocol.table_inputs import TableInput, TableInputError, TableVersion
from checkpointing.tables.changes import changes, pin
from tests.support.change_rows import arrow_counts, histories, history_settings, signed_rows

EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "15"))
READ = ["key", "day", "value"]
OPS = ["append", "append", "overwrite_day", "delete", "add_column", "readd_column",
       "rename_column", "drop_column", "expire"]


def _rows(lo: int, hi: int, extras: list[str]) -> pa.Table:
    ids = list(range(lo, hi))
    cols = {"key": pa.array([f"k{i % 5}" for i in ids]),
            "day": pa.array([f"d{i % 3}" for i in ids]),
            "value": pa.array(ids, pa.int64())}
    for name in extras:  # each write's own values: a stale column read by name shows
        cols[name] = pa.array([f"{name}{i}" for i in ids])
    return pa.table(cols)


def _apply(catalog, op: str, n: int, state: dict) -> None:
    from pyiceberg.expressions import EqualTo
    from pyiceberg.types import StringType

    table = catalog.load_table("bronze.events")
    extra = [f.name for f in table.schema().fields if f.name not in READ]
    if op == "append":
        lo = state["next"]
        state["next"] += 15 + 5 * n
        table.append(_rows(lo, state["next"], extra))
    elif op == "overwrite_day":
        lo = state["next"]
        state["next"] += 6
        rows = _rows(lo, state["next"], extra)
        rows = rows.set_column(1, "day", pa.array([f"d{n % 3}"] * rows.num_rows))
        table.overwrite(rows, overwrite_filter=EqualTo("day", f"d{n % 3}"))
    elif op == "delete":
        table.delete(EqualTo("key", f"k{n % 5}"))
    elif op == "add_column" and "extra" not in extra:
        # added again after a drop, it is a new column (a new field id): older files' values
        # of the dropped one are not its values
        with table.update_schema() as update:
            update.add_column("extra", StringType())
    elif op == "readd_column" and "extra" in extra:
        # dropped and added again under its name: a new column (a new field id)
        with table.update_schema() as update:
            update.delete_column("extra")
        with catalog.load_table("bronze.events").update_schema() as update:
            update.add_column("extra", StringType())
    elif op == "rename_column" and len(extra) == 1:
        with table.update_schema() as update:
            update.rename_column(extra[0], "note" if extra[0] == "extra" else "extra")
    elif op == "drop_column" and extra:
        with table.update_schema() as update:
            update.delete_column(extra[n % len(extra)])
    elif op == "expire" and table.current_snapshot() is not None:
        # expire every snapshot but the current one: a later read of an expired start is
        # refused in one line
        keep = table.current_snapshot().snapshot_id
        old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != keep]
        if old:
            table.maintenance.expire_snapshots().by_ids(old).commit()


def _content(catalog, version: TableVersion) -> Counter:
    t = catalog.load_table("bronze.events").scan(snapshot_id=version.snapshot_id,
                                                 selected_fields=tuple(READ)).to_arrow()
    return arrow_counts(t, READ)


def _ids(table, snapshot_id: int) -> dict[int, str]:
    """Field id -> column name in the schema of snapshot ``snapshot_id``."""
    snap = table.snapshot_by_id(snapshot_id)
    schema = next(s for s in table.schemas().values() if s.schema_id == snap.schema_id)
    return {f.field_id: f.name for f in schema.fields}


def _content_in(catalog, version: TableVersion | None, end: TableVersion) -> Counter:
    """pyiceberg's scan of ``version`` (in that snapshot's schema), its columns matched to
    those of ``end``'s schema by field id (a column ``version`` has not: null)."""
    table = catalog.load_table("bronze.events")
    target = _ids(table, end.snapshot_id)
    if version is None or version.snapshot_id is None:
        return Counter()
    source = _ids(table, version.snapshot_id)
    t = table.scan(snapshot_id=version.snapshot_id).to_arrow()
    cols = [t.column(source[i]).to_pylist() if i in source else [None] * t.num_rows
            for i in target]
    return Counter(zip(*cols, strict=True))


@history_settings(EXAMPLES)
@given(epochs=histories(OPS, 5),
       retry_after=st.lists(st.booleans(), min_size=1, max_size=3))
def test_change_sets_of_pyiceberg_histories_sum_to_the_content(tmp_path_factory, epochs,
                                                               retry_after):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    root = tmp_path_factory.mktemp("iceberg")
    os.environ["PYICEBERG_CATALOG__UP__TYPE"] = "sql"
    os.environ["PYICEBERG_CATALOG__UP__URI"] = f"sqlite:///{root}/catalog.db"
    catalog = load_catalog("up", type="sql", uri=f"sqlite:///{root}/catalog.db")
    catalog.create_namespace_if_not_exists("bronze")
    schema = Schema(NestedField(1, "key", StringType()), NestedField(2, "day", StringType()),
                    NestedField(3, "value", LongType()), NestedField(4, "extra", StringType()))
    catalog.create_table("bronze.events", schema, location=f"file://{root}/events",
                         partition_spec=PartitionSpec(
                             PartitionField(2, 1000, IdentityTransform(), "day")))
    state = {"next": 0}
    _apply(catalog, "append", 0, state)
    spec = TableInput(f"file://{root}/events", format="iceberg", name="bronze.events",
                      catalog="up")
    kept: Counter = Counter()
    start: TableVersion | None = None
    try:
        for i, ops in enumerate(epochs):
            for op, n in ops:
                _apply(catalog, op, n, state)
            end = pin(spec)
            if retry_after[i % len(retry_after)]:
                _apply(catalog, "append", i, state)
            try:
                found = changes(spec, start, end)
            except TableInputError as exc:
                assert "\n" not in str(exc) and str(root) not in str(exc), exc
                found, kept = changes(spec, None, end), Counter()
            columns = list(_ids(catalog.load_table("bronze.events"), end.snapshot_id).values())
            change = signed_rows(found, columns)
            want_change = _content_in(catalog, end, end)
            want_change.subtract(_content_in(catalog, found.start, end))
            assert +change == +want_change and -change == -want_change, (i, ops, columns)
            kept.update(signed_rows(found, READ))
            kept = +kept
            want = _content(catalog, end)
            assert kept == want, (i, ops, len(kept - want), len(want - kept))
            start = end
    finally:
        for k in ("PYICEBERG_CATALOG__UP__TYPE", "PYICEBERG_CATALOG__UP__URI"):
            os.environ.pop(k, None)


def test_a_table_read_by_name_refuses_a_column_added_again_and_reads_an_added_one(
        tmp_path):
    """A table with a name mapping (files written without field ids, as this project's
    committer adds Spark's files) is read by name: an added column is read, a column
    dropped and added again under its name is refused in one line, on a first read too."""
    import json

    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    catalog = load_catalog("mapped", type="sql", uri=f"sqlite:///{tmp_path}/c.db")
    catalog.create_namespace_if_not_exists("b")
    table = catalog.create_table("b.t", Schema(NestedField(1, "key", StringType())),
                                 location=f"file://{tmp_path}/t")
    with table.transaction() as tx:
        tx.set_properties(**{"schema.name-mapping.default": json.dumps(
            [{"field-id": 1, "names": ["key"]}])})
    table = catalog.load_table("b.t")
    table.append(pa.table({"key": ["a"]}))
    os.environ["PYICEBERG_CATALOG__MAPPED__TYPE"] = "sql"
    os.environ["PYICEBERG_CATALOG__MAPPED__URI"] = f"sqlite:///{tmp_path}/c.db"
    try:
        spec = TableInput(f"file://{tmp_path}/t", format="iceberg", name="b.t",
                          catalog="mapped")
        start = pin(spec)
        with table.update_schema() as update:
            update.add_column("extra", StringType())
        table = catalog.load_table("b.t")
        table.append(pa.table({"key": ["b"], "extra": ["x"]}))
        found = changes(spec, start, pin(spec))
        assert not found.field_ids  # read by name
        assert +signed_rows(found, ["key", "extra"]) == Counter({("b", "x"): 1})
        with table.update_schema() as update:
            update.delete_column("extra")
        with catalog.load_table("b.t").update_schema() as update:
            update.add_column("extra", StringType())
        for since in (start, None):
            try:
                changes(spec, since, pin(spec))
            except TableInputError as exc:
                message = str(exc)
                assert "\n" not in message and "'extra'" in message, message
                assert str(tmp_path) not in message, message
            else:
                raise AssertionError(f"a re-added column read by name ({since})")
    finally:
        for k in ("PYICEBERG_CATALOG__MAPPED__TYPE", "PYICEBERG_CATALOG__MAPPED__URI"):
            os.environ.pop(k, None)
