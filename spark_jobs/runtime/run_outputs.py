"""How a job stages its outputs in one attempt: files published by the manifest, and table
outputs staged inside their table's location for the epoch's completion to commit as one
table version (PROTOCOL 6.12). Part of :class:`~spark_jobs.runtime.JobRun`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpointing.storage import LocalStorage, open_storage
from checkpointing.tables.spec import TableSpec

from .observed import observed
from .run_state import RunState
from .session import spark_uri
from .spark_conf import OUTPUT_FILES_CONF


class RunOutputs(RunState):
    """A job run's staged outputs (JobRun's fields and :class:`RunState`'s writes)."""

    def write_output(self, df: Any, output: str, rows: int | None = None) -> int:
        """Stage ``df`` as output ``output`` (published only when the epoch completes).
        Returns its row count: ``rows`` when given, else counted by the write itself."""
        files = self.spark.conf.get(OUTPUT_FILES_CONF, None)
        df, counted = _counting(df, rows)
        if files:
            df = df.coalesce(int(files))
        path, prefix = self._spark_write(
            f"output:{output}", df, lambda a: self._target(f"out-{output}", "staging", a),
            lambda d, t: d.write.mode("overwrite").parquet(t[0]))
        rows = counted(lambda: _written_rows(self.spark, path))
        if prefix is None:
            parts = sorted(p for p in Path(path).iterdir() if p.suffix == ".parquet")
            self.writer.stage_output(output, parts, rows=rows)
        else:
            self.writer.stage_stored_output(output, self.storage.stored(prefix), rows=rows)
        return rows

    def write_table(self, df: Any, output: str, spec: TableSpec, rows: int | None = None,
                    replaced: Any = (), deleted: Any = None, grows: bool = False) -> int:
        """Stage ``df`` as table output ``output`` (PROTOCOL 6.12): Spark writes Parquet
        straight into the table's location, in a directory of this attempt that the table's
        log does not reference; the epoch's completion commits it as one table version
        (Delta: ``txn(appId, epoch)``), exactly once. Partition columns (``spec``'s
        ``partition_by``) are written as directories; string, integer, boolean and date
        columns keep their type, others become strings.

        ``overwrite``: ``df`` is the table's whole content after the epoch; with
        ``grows=True``, the rows the epoch adds to the content after the previous epoch,
        whose files stay (by reference, not rewritten; :meth:`can_grow` says whether
        there is such a previous epoch).
        ``replace_partitions``: ``df`` holds the partitions the epoch changed, in full; the
        previous epoch's files of the other partitions stay (by reference, not rewritten).
        ``replaced`` names partitions the epoch recomputed and found empty (values, or
        value tuples for several partition columns): removed from the table.
        ``append``: ``df`` holds the rows the epoch adds.
        ``merge``: ``df`` holds the rows the epoch inserts or updates, one per key
        (``spec.keys``), and ``deleted`` (a DataFrame with the key columns) the keys it
        deletes; the commit merges them by key (Delta: a MERGE commit; Iceberg: an
        overwrite snapshot deleting the changed keys' rows and adding the new ones).

        Returns the rows written: ``rows`` when given, else counted by the write itself
        (no separate Spark job)."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        from checkpointing.protocol.table_formats import traits
        from checkpointing.tables.spec import DELETE_COLUMN

        if spec.mode == "merge":
            # Staged as one set of change rows, unpartitioned: the commit's merge writes
            # the table's files (and partitions) itself.
            df = df.withColumn(DELETE_COLUMN, F.lit(False))
            if deleted is not None:
                df = df.unionByName(deleted.select(*spec.keys).withColumn(
                    DELETE_COLUMN, F.lit(True)), allowMissingColumns=True)
        elif deleted is not None:
            raise ValueError(f"deleted= needs mode merge, not {spec.mode!r}")
        df, counted = _counting(df, rows)
        dirs = [] if spec.mode == "merge" else list(spec.partition_by)
        if traits(spec.format).partition_columns_in_files and dirs:
            # Iceberg reads partition values from the files' statistics: the files keep
            # the columns, and directories of copies group them (one value per file).
            dirs = [spec.partition_dir_prefix + c for c in spec.partition_by]
            for col, d in zip(spec.partition_by, dirs, strict=True):
                df = df.withColumn(d, F.col(col).cast("string"))
        else:
            for col in dirs:
                # Spark writes these types' partition directories as Delta serialises
                # their partition values; any other type is published as a string column.
                if df.schema[col].dataType.typeName() not in _PARTITION_TYPES:
                    df = df.withColumn(col, F.col(col).cast("string"))
        files = self.spark.conf.get(OUTPUT_FILES_CONF, None)
        if files:
            df = df.coalesce(int(files))
        schema = to_arrow_schema(df.drop(DELETE_COLUMN, *[d for d in dirs
                                                          if d not in spec.partition_by])
                                 .schema)
        store = open_storage(spec.location, endpoint_url=self.storage.endpoint_url)
        local = not self.distributed and isinstance(store, LocalStorage)
        target = str(self.scratch / f"table-{output}")
        if local:
            with self._snapshot_write():
                df.write.mode("overwrite").partitionBy(*dirs).parquet(target)
        else:
            prefix = self._spark_write(
                f"table:{output}", df,
                self.storage.table_staging_dir,
                lambda d, p: d.write.mode("overwrite").partitionBy(*dirs).parquet(
                    spark_uri(store.uri(p))))
        rows = counted(lambda: _written_rows(
            self.spark, target if local else spark_uri(store.uri(prefix))))
        if local:
            parts = sorted(p for p in Path(target).rglob("*.parquet"))
            ref = self.writer.stage_table_output(output, spec, parts, rows=rows,
                                                 names=[p.relative_to(target).as_posix()
                                                        for p in parts],
                                                 table_storage=store, schema=schema,
                                                 replaced=replaced, grows=grows)
        else:
            keys = [o.key for o in store.list(prefix + "/") if o.key.endswith(".parquet")
                    and not o.key.rsplit("/", 1)[-1].startswith((".", "_"))]
            ref = self.writer.stage_stored_table_output(output, spec, keys, schema, rows=rows,
                                                        table_storage=store, replaced=replaced,
                                                        grows=grows)
        self._register(output, spec, ref)
        return rows

    def _register(self, output: str, spec: TableSpec, ref: Any) -> None:
        """A Delta output with a catalog name: registered in Spark's built-in catalog
        (:mod:`.catalog`) unless the epoch it restores from had the output under the same
        name and location (its task registered it before acknowledging): a later epoch pays
        no catalog request."""
        from checkpointing.protocol.table_formats import traits

        if not spec.name or not traits(spec.format).spark_catalog_named:
            return
        previous = self.writer.previous
        prev = previous.outputs.get(output) if previous else None
        had = TableSpec.from_json(prev.meta["table"]) if prev and "table" in prev.meta else None
        if had is not None and (had.name, had.location) == (spec.name, spec.location):
            return
        from .catalog import register

        register(self.spark, spec, ref.meta["schema"], self.storage.endpoint_url)

    def keep_table(self, output: str, spec: TableSpec, rows: int | None = None,
                   replaced: Any = ()) -> None:
        """Declare table output ``output`` unchanged by this epoch, without a Spark job: a
        ``replace_partitions`` table keeps the previous epoch's files (but those of the
        ``replaced`` partitions), an ``overwrite`` table all of them (:meth:`can_grow`);
        its commit records the epoch with no data change."""
        if spec.mode not in ("replace_partitions", "overwrite"):
            raise ValueError("keep_table needs mode replace_partitions or overwrite, not "
                             f"{spec.mode!r}")
        ref = self.writer.stage_stored_table_output(output, spec, [], None, rows=rows,
                                                    table_storage=None, replaced=replaced,
                                                    grows=spec.mode == "overwrite")
        self._register(output, spec, ref)

    def can_grow(self, output: str, spec: TableSpec) -> list[Any] | None:
        """The files of ``overwrite`` table output ``output`` after the restored epoch,
        which an epoch that only adds rows keeps by reference (``write_table(...,
        grows=True)``, :meth:`keep_table`); None when there is no such output to grow."""
        return self.writer.previous_table_files(output, spec) if spec.mode == "overwrite" \
            else None

    def stage_empty(self, output: str) -> None:
        """Stage ``output`` with no rows and no files, without a Spark job (downstream
        readers get an empty frame of the schema they read it with)."""
        self.writer.stage_stored_output(output, [], rows=0)


def _counting(df: Any, rows: int | None
              ) -> tuple[Any, Callable[[Callable[[], int]], int]]:
    """``df`` observed so that the action writing it also counts its rows (Spark's
    ``Observation``: one pass, no count job), and a function giving the count after that
    action (given how to count the rows written, should the observation come back
    empty: :mod:`.observed`); with ``rows`` known, ``df`` unchanged and ``rows``."""
    if rows is not None:
        return df, lambda written: rows
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    obs = Observation()

    def counted(written: Callable[[], int]) -> int:
        return int(observed(obs, lambda: {"rows": written()})["rows"])

    return df.observe(obs, F.count(F.lit(1)).alias("rows")), counted


def _written_rows(spark: Any, path: str) -> int:
    """Rows of the Parquet files a write left under ``path`` (partition directories
    included); a write of no row may leave no file."""
    from pyspark.errors import AnalysisException

    try:
        return int(spark.read.parquet(path).count())
    except AnalysisException as exc:
        if "UNABLE_TO_INFER_SCHEMA" in str(exc) or "PATH_NOT_FOUND" in str(exc):
            return 0
        raise


#: column types whose partition directories Spark writes as Delta serialises the values
_PARTITION_TYPES = ("string", "integer", "long", "short", "byte", "boolean", "date")
