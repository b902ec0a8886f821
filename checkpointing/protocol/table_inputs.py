"""Upstream tables as incremental inputs (PROTOCOL 6.14): Flink's source offsets, for tables.

A task declares an upstream Delta or Iceberg table (:class:`TableInput`) that another
pipeline, or another team, writes. When an epoch begins, its barrier pins the version every
table input of the plan is read up to (:func:`pin`): whatever is committed to the table
afterwards, every task and every retry of the epoch reads the same change set. A task then
reads the change between the version its parent epoch consumed (its handle's
``table_offsets``) and the pinned one (:func:`changes`): the data files the version range
added and those it removed, whose rows are retractions. Finding them reads the table's log
of that range (Delta's commits, Iceberg's manifests), never the data of unchanged files.

This module holds the declaration and the change set, common to both formats; each format's
reader lives in the format's module (:mod:`.delta`, :mod:`.iceberg`), reached through
:mod:`.table_changes`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from checkpointing.errors import CheckpointError
from checkpointing.ids import validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.table_formats import SPARK_CATALOG_NAME, traits

if TYPE_CHECKING:  # pyarrow comes with the table extras: imported where it is used
    import pyarrow as pa



class TableInputError(CheckpointError):
    """A table input cannot be read as asked (a removed version, an unsupported table
    feature, a version that went back): the epoch is declined with this one line."""


#: what to do when the changes since the consumed version can no longer be read
WAY_FORWARD = ("restore the task from a later savepoint, or start its state afresh from the "
               "table's current content")


class IncompatibleSchema(TableInputError):
    """The upstream table's schema changed in a way the change set cannot carry (a column
    dropped or retyped): rows of the two schemas cannot be subtracted from each other."""


@dataclass(frozen=True)
class TableInput:
    """An upstream table a task reads incrementally.

    :param location: the table's URI (Delta: its location, or None with ``name``;
        Iceberg: informative, the catalog locates the table).
    :param format: ``"delta"`` or ``"iceberg"``.
    :param name: Iceberg: the table's identifier in its catalog (``namespace.table``).
        Delta (1.19): its name in Spark's session catalog (``schema.table``), resolved to
        its location when an epoch begins (:mod:`checkpointing.tables.metastore`); the
        barrier's plan holds both.
    :param catalog: Iceberg: the catalog's name, configured by pyiceberg's own settings.
    :param starting_version: the first epoch reads the changes from this version on
        (Delta: a table version; Iceberg: a snapshot's sequence number) instead of the
        table's whole content at the pinned version.
    :param expect_new_version: every epoch of the main line expects a version newer than
        the one its parent epoch read (PROTOCOL 6.14): an upstream that did not commit is
        missing input, waited for and then declined, not an epoch with nothing new.
    """

    location: str | None = None
    format: str = "delta"
    name: str | None = None
    catalog: str = "default"
    starting_version: int | None = None
    expect_new_version: bool = False

    def __post_init__(self) -> None:
        fmt = traits(self.format)
        if fmt.catalog_named:
            if not self.name or "." not in self.name:
                raise ValueError(f"a {self.format} table input needs name='namespace.table'")
        elif self.name is not None:
            if not fmt.spark_catalog_named or not SPARK_CATALOG_NAME.fullmatch(self.name):
                raise ValueError(f"a {self.format} table input's name {self.name!r} must be "
                                 "'schema.table' (letters, digits and '_'), its name in "
                                 "Spark's catalog")
        elif not (self.location or "").strip():
            raise ValueError(f"a {self.format} table input needs its location, or its name "
                             "in Spark's catalog (name='schema.table')")
        if self.location is not None and self.location != self.location.rstrip("/"):
            raise ValueError(f"table location {self.location!r} must be a URI without a "
                             "trailing '/'")
        if self.starting_version is not None and self.starting_version < 0:
            raise ValueError("starting_version must be >= 0")

    @property
    def label(self) -> str:
        """How errors and logs name the table, without its storage path: the Iceberg
        identifier, or the last segment of a Delta table's location."""
        if self.name:
            return self.name
        return re.split(r"[/:]", self.location or "")[-1] or "table"

    def to_json(self) -> JsonObject:
        d: JsonObject = {"format": self.format}
        for key in ("location", "name", "starting_version"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        if traits(self.format).catalog_named:
            d["catalog"] = self.catalog
        if self.expect_new_version:  # (1.14) absent when false, as a 1.13 writer left it
            d["expect_new_version"] = True
        return d

    @classmethod
    def from_json(cls, d: JsonObject) -> TableInput:
        return cls(d.get("location"), d.get("format", "delta"), d.get("name"),
                   d.get("catalog", "default"), d.get("starting_version"),
                   bool(d.get("expect_new_version", False)))


@dataclass(frozen=True, order=True)
class TableVersion:
    """A version of a table, as the barrier pins it and a handle's offsets record it.
    ``version`` orders versions (Delta: the table version; Iceberg: the snapshot's sequence
    number); ``snapshot_id`` identifies an Iceberg snapshot (None for Delta, and for an
    Iceberg table that has no snapshot yet)."""

    version: int
    snapshot_id: int | None = None

    def to_json(self) -> JsonObject:
        d: JsonObject = {"version": self.version}
        if self.snapshot_id is not None:
            d["snapshot_id"] = self.snapshot_id
        return d

    @classmethod
    def from_json(cls, d: JsonObject) -> TableVersion:
        sid = d.get("snapshot_id")
        return cls(int(d["version"]), int(sid) if sid is not None else None)


def versions_to_json(versions: Mapping[str, TableVersion]) -> JsonObject:
    """``{input name: version}`` as a barrier's ``table_versions`` and a state handle's
    ``table_offsets`` are written (PROTOCOL 6.14)."""
    return {name: v.to_json() for name, v in versions.items()}


def versions_from_json(doc: object) -> dict[str, TableVersion]:
    """The inverse of :func:`versions_to_json`; a missing map is empty."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise TypeError(f"table versions must be an object, not {type(doc).__name__}")
    return {str(k): TableVersion.from_json(dict(v)) for k, v in doc.items()}


#: the version of a table that has no data yet (Delta: before version 0; Iceberg: no
#: snapshot): a change set from it holds the table's whole content
EMPTY = TableVersion(-1)


@dataclass(frozen=True)
class DataFile:
    """A data file of a table: what Spark reads, and the partition values a Delta file
    leaves out of its own columns.

    Which of its rows count, by their position in the file (Parquet's row index, which is
    what Delta's deletion vectors and Iceberg's position deletes number): all of them, save
    ``skip_rows`` (the rows a deletion vector deleted); or, when ``only_rows`` is set, just
    those (a file whose deletion vector grew between two versions retracts exactly the rows
    deleted in between)."""

    uri: str
    size: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    records: int | None = None
    skip_rows: tuple[int, ...] = ()
    only_rows: tuple[int, ...] | None = None

    @property
    def filtered(self) -> bool:
        """Whether some of its rows do not count (a reader must select by row index)."""
        return bool(self.skip_rows) or self.only_rows is not None

    @property
    def changed_bytes(self) -> int:
        """The bytes of the rows this file changes: all of it, or, when ``only_rows`` names
        a few of its ``records``, their share of its size. A DELETE of a few rows gives a
        large file a deletion vector; the change is those rows, not the file."""
        if self.only_rows is None or not self.records:
            return self.size
        return self.size * min(len(self.only_rows), self.records) // self.records


@dataclass(frozen=True)
class ChangeSet:
    """The change of a table input between two versions: ``added`` files (rows to add) and
    ``removed`` files (rows to retract), read from the log of ``(start, end]``.

    ``schema``: the table's Arrow schema at ``end`` (columns added since ``start`` read as
    null from older files); ``partition_columns`` whose values come from the log, not from
    the files (Delta), listed in ``log_partition_columns``."""

    start: TableVersion | None
    end: TableVersion
    added: tuple[DataFile, ...]
    removed: tuple[DataFile, ...]
    schema: pa.Schema
    log_partition_columns: tuple[str, ...] = ()
    #: log documents read to find the change (Delta commits, Iceberg manifests lists)
    log_reads: int = 0
    #: the name each column has in the data files, where it differs from the table's
    #: (Delta's column mapping: files name columns by a physical name that a rename keeps)
    physical_names: dict[str, str] = field(default_factory=dict)
    #: columns renamed in the range (Delta's column mapping): old name -> (new name, the
    #: version of the first schema change), so that a job still reading an old name is
    #: told which rename it missed
    renamed: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: Iceberg: each column's field id at ``end``. A data file names a column as the schema
    #: of its write did; the id is what stays: a renamed column keeps it, and a column
    #: dropped and added again under the same name gets a new one (older files hold none of
    #: it). Readers match the files' columns by these ids, not by name.
    field_ids: dict[str, int] = field(default_factory=dict)

    def identity(self, column: str) -> str:
        """What names ``column`` across schema changes: its field id (Iceberg), the name
        its files give it (Delta's column mapping), else its name."""
        if column in self.field_ids:
            return f"id:{self.field_ids[column]}"
        return self.physical_names.get(column, column)

    @property
    def full(self) -> bool:
        """Whether this is a first read: the whole table at ``end``."""
        return self.start is None or self.start.version < 0

    @property
    def bytes_added(self) -> int:
        return sum(f.size for f in self.added)

    @property
    def bytes_removed(self) -> int:
        return sum(f.size for f in self.removed)


def check_schema(label: str, old: pa.Schema, new: pa.Schema, version: int,
                 drops_allowed: bool = False) -> None:
    """Refuse a schema change between two versions that is not an added column: a column
    of ``old`` missing from ``new`` or of another type (Arrow schemas). With
    ``drops_allowed`` (schemas named by physical column: Delta's column mapping, where a
    rename keeps the name and a dropped column stays in old files unread) a missing column
    is no refusal: the change reads in the newer schema, and a job that still reads a
    dropped column fails naming it."""
    for f in old:
        if f.name not in new.names and drops_allowed:
            continue
        if f.name not in new.names:
            raise IncompatibleSchema(f"table input {label!r}: column {f.name!r} was dropped "
                                     f"by version {version}; an incompatible schema change "
                                     "cannot be read incrementally")
        if not new.field(f.name).type.equals(f.type):
            raise IncompatibleSchema(
                f"table input {label!r}: column {f.name!r} changed type from {f.type} to "
                f"{new.field(f.name).type} in version {version}; an incompatible schema "
                "change cannot be read incrementally")


def validate_inputs(inputs: dict[str, TableInput]) -> None:
    for name in inputs:
        validate_id(name, "table input name")
