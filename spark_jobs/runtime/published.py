"""How consumers read a pipeline's published tables: through the manifest, so that they
never see output of an incomplete epoch (phase two of the two-phase publish). A table
output (PROTOCOL 6.12) is read through its table, at the version its epoch committed."""

from __future__ import annotations

from typing import Any

from checkpointing import Coordinator
from checkpointing.errors import CheckpointError
from checkpointing.tables.spec import TableSpec

from .session import spark_uri


def read_published(spark: Any, coordinator: Coordinator, output: str) -> Any:
    """The currently published version of ``output``, as a Spark DataFrame."""
    m = coordinator.catalog.manifest()
    if m is None or output not in m.outputs:
        raise CheckpointError(f"nothing published as {output!r} for pipeline "
                              f"{coordinator.pipeline_id!r} yet")
    out = m.outputs[output]
    if "table" in (out.meta or {}):
        return _read_table(spark, coordinator, out.meta)
    df = spark.read.parquet(*[spark_uri(f.uri) for f in out.files])
    # Columns the job keeps for itself (a state partition column found in the paths).
    internal = [c for c in (out.meta or {}).get("internal_columns", []) if c in df.columns]
    return df.drop(*internal) if internal else df


def _read_table(spark: Any, coordinator: Coordinator, meta: dict[str, Any]) -> Any:
    """A table output at the version its epoch committed: the data files the table lists
    at that version (its format's reader: Delta's log, Iceberg's snapshot), read by Spark,
    as a table input's first read is (PROTOCOL 6.14)."""
    from checkpointing.protocol.table_inputs import TableInput
    from checkpointing.tables.changes import committed_version

    from .table_source import read_changes

    spec = TableSpec.from_json(meta["table"])
    source = TableInput(spec.location, spec.format, spec.name, spec.catalog)
    endpoint = coordinator.endpoint_url
    version = committed_version(source, int(meta["table_version"]), endpoint)
    return read_changes(spark, "published", source, None, version, endpoint).added


def table_frame(spark: Any, uris: list[str], spec: TableSpec, schema: str) -> Any:
    """Spark's DataFrame over a table's data files ``uris``. Delta leaves partition columns
    out of the files: they are taken from each file's ``<column>=<value>`` directory and
    typed as the table's schema (JSON, ``schema``) says; files staged by different epochs
    sit in different directories, so Spark's own partition discovery cannot be used."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from checkpointing.protocol.table_formats import traits

    if traits(spec.format).partition_columns_in_files:
        import base64

        import pyarrow as pa

        return _files_frame(spark, uris,
                            pa.ipc.read_schema(pa.py_buffer(base64.b64decode(schema))))
    from deltalake import Schema

    if not uris:
        return spark.createDataFrame([], from_arrow_schema(Schema.from_json(schema).to_arrow()))
    types = {f["name"]: f["type"] for f in json.loads(schema)["fields"]}
    df = spark.read.parquet(*[spark_uri(u) for u in uris])
    for col in spec.partition_by:
        raw = F.url_decode(F.regexp_extract(F.input_file_name(), f"/{col}=([^/]*)/", 1))
        df = df.withColumn(col, F.when(raw == "__HIVE_DEFAULT_PARTITION__", F.lit(None))
                           .otherwise(raw).cast(types[col]))
    return df


def _files_frame(spark: Any, uris: list[str], arrow_schema: Any) -> Any:
    """Parquet files that hold every column (Iceberg's), or an empty frame of the schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if not uris:
        return spark.createDataFrame([], from_arrow_schema(arrow_schema))
    return spark.read.parquet(*[spark_uri(u) for u in uris])
