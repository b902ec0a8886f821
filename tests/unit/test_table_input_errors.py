"""Every way into a foreign table's library declines in one line (PROTOCOL 6.14): pinning,
reading a change set (a first read, a read from ``starting_version``, a range with no
change, a range with changes) and resolving a committed version. A table damaged under
the reader (its log or metadata removed, a commit file garbled) gives
:class:`TableInputError`, one line naming the table by its label, never a raw library
traceback or a storage path."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from checkpointing.protocol.table_inputs import TableInput, TableInputError, TableVersion
from checkpointing.tables.changes import changes, committed_version, pin


def _delta(root: Path) -> tuple[TableInput, TableVersion]:
    from deltalake import write_deltalake

    where = root / "up"
    write_deltalake(str(where), pd.DataFrame({"key": ["a", "b"], "value": [1, 2]}))
    write_deltalake(str(where), pd.DataFrame({"key": ["c"], "value": [3]}), mode="append")
    spec = TableInput(f"file://{where}", starting_version=1)
    return spec, pin(spec)


def _iceberg(root: Path) -> tuple[TableInput, TableVersion]:
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    os.environ["PYICEBERG_CATALOG__UP__TYPE"] = "sql"
    os.environ["PYICEBERG_CATALOG__UP__URI"] = f"sqlite:///{root}/catalog.db"
    catalog = load_catalog("up", type="sql", uri=f"sqlite:///{root}/catalog.db")
    catalog.create_namespace_if_not_exists("bronze")
    rows = pa.table({"key": pa.array(["a", "b"]), "value": pa.array([1, 2], pa.int64())})
    table = catalog.create_table("bronze.events", rows.schema, location=f"file://{root}/up")
    table.append(rows)
    table.append(rows.slice(0, 1))
    spec = TableInput(f"file://{root}/up", format="iceberg", name="bronze.events",
                      catalog="up")
    return spec, pin(spec)


@pytest.fixture(autouse=True)
def _no_catalog_left():
    yield
    for k in ("PYICEBERG_CATALOG__UP__TYPE", "PYICEBERG_CATALOG__UP__URI"):
        os.environ.pop(k, None)


def _remove_log(root: Path, fmt: str) -> None:
    shutil.rmtree(root / "up" / ("_delta_log" if fmt == "delta" else "metadata"))


def _garble_files(root: Path, fmt: str) -> None:
    folder = root / "up" / ("_delta_log" if fmt == "delta" else "metadata")
    for f in folder.iterdir():
        if f.is_file() and f.suffix in (".json", ".avro"):
            f.write_bytes(b"{ not what the format says")


DAMAGE: dict[str, Callable[[Path, str], None]] = {
    "log or metadata removed": _remove_log, "log or metadata garbled": _garble_files}
CALLS: dict[str, Callable[[TableInput, TableVersion], object]] = {
    "pin": lambda spec, v: pin(spec),
    "first read": lambda spec, v: changes(spec, None, v),
    "no change": lambda spec, v: changes(spec, v, v),
    "a range": lambda spec, v: changes(spec, TableVersion(v.version - 1, v.snapshot_id), v),
    "committed version": lambda spec, v: committed_version(
        spec, v.snapshot_id if spec.format == "iceberg" and v.snapshot_id else v.version),
}


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_read_of_a_damaged_table_declines_in_one_line(tmp_path, fmt, damage):
    spec, pinned = (_delta if fmt == "delta" else _iceberg)(tmp_path)
    DAMAGE[damage](tmp_path, fmt)
    for name, call in CALLS.items():
        if name == "committed version" and fmt == "delta":
            continue  # a Delta version is its number: resolving it reads nothing
        with pytest.raises(TableInputError) as exc:
            call(spec, pinned)
        msg = str(exc.value)
        assert "\n" not in msg and str(tmp_path) not in msg, (name, msg)
        assert "cannot be read" in msg or "table input" in msg, (name, msg)
