"""Upstream tables as a job's incremental input (PROTOCOL 6.14): the rows a Delta or Iceberg
table gained and lost since the version the task's parent epoch consumed, up to the version
the epoch's barrier pinned.

Spark reads only the data files of the change: those the version range added (rows to add)
and those it removed (rows to retract: an overwritten partition, a rewritten file of a
delete or an update, an overwrite). A job that keeps an aggregate subtracts the removed rows
and adds the added ones, and its result equals the aggregate over the table's content at
the pinned version, whatever the upstream writer did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpointing.protocol.table_inputs import (
    ChangeSet,
    DataFile,
    TableInput,
    TableInputError,
    TableVersion,
)
from checkpointing.tables.changes import changes

from .session import spark_uri

#: the column :meth:`TableChanges.signed` adds: +1 for an added row, -1 for a removed one
SIGN = "_sign"


@dataclass
class TableChanges:
    """What changed in table input ``name`` in (``start``, ``end``].

    ``added``: the rows the versions added; ``removed``: the rows they removed (retract
    them). On the first read (``full``) ``added`` is the table's whole content at ``end``
    and ``removed`` is empty. ``start`` is None on a first read."""

    name: str
    start: TableVersion | None
    end: TableVersion
    added: Any  # pyspark DataFrame
    removed: Any  # pyspark DataFrame
    change_set: ChangeSet

    @property
    def full(self) -> bool:
        return self.change_set.full

    @property
    def empty(self) -> bool:
        """Whether nothing changed (no file added or removed): no Spark job is needed."""
        return not self.change_set.added and not self.change_set.removed

    def signed(self, column: str = SIGN) -> Any:
        """``added`` and ``removed`` as one frame, with ``column`` +1 or -1: what a
        running aggregate sums (``sum(value * _sign)``, ``sum(_sign)`` for counts)."""
        from pyspark.sql import functions as F

        return self.added.withColumn(column, F.lit(1)).unionByName(
            self.removed.withColumn(column, F.lit(-1)))

    def metrics(self) -> dict[str, Any]:
        """What the handle's metrics record of this read."""
        cs = self.change_set
        return {"from_version": None if self.start is None else self.start.version,
                "to_version": self.end.version, "full": self.full,
                "files_added": len(cs.added), "files_removed": len(cs.removed),
                "bytes_added": cs.bytes_added, "bytes_removed": cs.bytes_removed,
                "log_reads": cs.log_reads}


def read_changes(spark: Any, name: str, spec: TableInput, start: TableVersion | None,
                 end: TableVersion, endpoint_url: str | None) -> TableChanges:
    """The change set of ``spec`` in (``start``, ``end``] as DataFrames. A refusal
    (:class:`TableInputError`) is raised as it is: the caller declines the epoch."""
    cs = changes(spec, start, end, endpoint_url)
    return TableChanges(name, start, end, _frame(spark, cs, cs.added),
                        _frame(spark, cs, cs.removed), cs)


class ChangeMismatch(TableInputError):
    """A change set that differs from the difference of the two snapshots it lies
    between: a reader's bug, refused before anything is published."""


def verify_changes(spark: Any, name: str, spec: TableInput, found: TableChanges,
                   endpoint_url: str | None) -> None:
    """Check ``found`` against the table itself: the table's whole content at ``end`` less
    its content at ``start`` (each read as a first read is, every data file of that
    version with its deletes applied, not from the log between them), as signed row
    counts, must equal the change set's added less its removed rows. Columns are matched
    by the name the files give them (a rename under column mapping is the same column);
    a column added since ``start`` is null before it. Raises :class:`ChangeMismatch`,
    naming how many rows differ, on any difference."""
    from pyspark.sql import functions as F

    if found.full or found.start is None:
        return  # a first read is the snapshot itself
    before = changes(spec, None, found.start, endpoint_url)
    after = found.change_set
    old_physical = {before.identity(c): c for c in before.schema.names}
    columns = list(after.schema.names)
    prior = _frame(spark, before, before.added)
    renamed = []
    for c in columns:
        source = old_physical.get(after.identity(c))
        renamed.append(F.col(_quoted(source)).alias(c) if source is not None
                       else F.lit(None).cast(found.added.schema[c].dataType).alias(c))
    prior = prior.select(*renamed)
    now = read_changes(spark, name, spec, None, found.end, endpoint_url).added
    # One aggregation over the four signed frames, each row keyed by a 64-bit hash of its
    # columns: the change (added +1, removed -1) less the truth (content at end +1, at
    # start -1) must cancel in every group. Grouping by a hash, not by every column, keeps
    # the shuffle small; a collision could hide a difference with odds of about 2^-64.
    row = F.xxhash64(*[F.col(_quoted(c)) for c in columns]).alias("_row")

    def signed(frame: Any, sign: int) -> Any:
        return frame.select(*columns).select(row).withColumn(SIGN, F.lit(sign))

    total = (signed(found.added, 1).unionByName(signed(found.removed, -1))
             .unionByName(signed(now, -1)).unionByName(signed(prior, 1)))
    differ = total.groupBy("_row").agg(F.sum(SIGN).alias(SIGN)) \
        .where(F.col(SIGN) != 0).count()
    if differ:
        raise ChangeMismatch(
            f"table input {spec.label!r}: the change set of versions "
            f"{found.start.version}..{found.end.version} differs from the difference of the "
            f"table's content at those versions ({differ} distinct row(s)); the epoch is "
            "declined and nothing is published: report it with the two versions")


#: row positions a filter lists as literals up to this many; more are joined as a frame
_INLINE_ROWS = 1000
_ROW = "__ckpt_row_index"


def _frame(spark: Any, cs: ChangeSet, files: tuple[DataFile, ...]) -> Any:
    """The rows of ``files``, in the table's schema at the change's end: Spark reads the
    files (a column added since a file was written reads as null; under Delta's column
    mapping, by the name the files give it; Iceberg's, by field id); Delta's partition
    columns, which its files leave out, come from the log, one literal per partition. A
    file with rows that do not count (deletion vectors) is read alone and its rows selected
    by Parquet's row index (Spark's ``_metadata.row_index``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(cs.schema)
    if not files:
        return spark.createDataFrame([], schema)
    parts = [c for c in cs.log_partition_columns if c in schema.fieldNames()]
    data = _without(cs.schema, parts)
    physical = cs.physical_names
    read_schema = from_arrow_schema(_renamed(data, physical))
    ids = cs.field_ids
    if ids:
        # Iceberg: each column is the file's column of its field id, whatever the file
        # names it (a rename keeps the id; a column dropped and added again has a new one,
        # which older files do not hold: null). A file without field ids fails the read.
        from pyspark.sql.types import StructField, StructType

        spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
        read_schema = StructType([
            StructField(f.name, f.dataType, f.nullable, {"parquet.field.id": ids[f.name]})
            if f.name in ids else f for f in read_schema.fields])
    groups: dict[tuple[Any, ...], list[str]] = {}
    alone: list[tuple[tuple[Any, ...], DataFile]] = []
    for f in files:
        key = tuple(f.partition_values.get(c) for c in parts)
        if f.filtered:
            alone.append((key, f))
        else:
            groups.setdefault(key, []).append(spark_uri(f.uri))
    reads = [(key, spark.read.schema(read_schema).parquet(*uris))
             for key, uris in sorted(groups.items(),
                                     key=lambda kv: tuple(str(v) for v in kv[0]))]
    reads += [(key, _selected(spark, spark.read.schema(read_schema).parquet(spark_uri(f.uri)),
                              f)) for key, f in alone]
    frame = None
    for key, df in reads:
        df = df.select(*[F.col(_quoted(physical.get(n, n))).alias(n) for n in data.names])
        for n in data.names if ids else ():
            # the ids name columns of the upstream table only: a frame written on (a
            # state, an output) must not carry them into its own files
            df = df.withMetadata(n, {})
        for col, value in zip(parts, key, strict=True):
            df = df.withColumn(col, F.lit(value).cast(schema[col].dataType))
        df = df.select(*schema.fieldNames())
        frame = df if frame is None else frame.unionByName(df)
    return frame


def _selected(spark: Any, df: Any, f: DataFile) -> Any:
    """``df`` (one file) with just the rows of ``f`` that count, by row index."""
    from pyspark.sql import functions as F

    rows = f.only_rows if f.only_rows is not None else f.skip_rows
    keep = f.only_rows is not None
    df = df.withColumn(_ROW, F.col("_metadata.row_index"))
    if len(rows) <= _INLINE_ROWS:
        test = F.col(_ROW).isin(list(rows))
        return df.where(test if keep else ~test).drop(_ROW)
    import pandas as pd

    listed = spark.createDataFrame(pd.DataFrame({_ROW: pd.Series(rows, dtype="int64")}))
    return df.join(F.broadcast(listed), _ROW, "left_semi" if keep else "left_anti").drop(_ROW)


def _renamed(schema: Any, names: dict[str, str]) -> Any:
    import pyarrow as pa

    return pa.schema([f.with_name(names.get(f.name, f.name)) for f in schema])


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _without(schema: Any, names: list[str]) -> Any:
    import pyarrow as pa

    return pa.schema([f for f in schema if f.name not in names])


__all__ = ["SIGN", "ChangeMismatch", "TableChanges", "TableInputError", "read_changes",
           "verify_changes"]
