"""How consumers read a pipeline's published tables: through the manifest, so that they
never see output of an incomplete epoch (phase two of the two-phase publish)."""

from __future__ import annotations

from typing import Any

from checkpointing import Coordinator, read_manifest
from checkpointing.errors import CheckpointError

from .session import spark_uri


def read_published(spark: Any, coordinator: Coordinator, output: str):
    """The currently published version of ``output``, as a Spark DataFrame."""
    m = read_manifest(coordinator.storage, coordinator.layout)
    if m is None or output not in m.outputs:
        raise CheckpointError(f"nothing published as {output!r} for pipeline "
                              f"{coordinator.pipeline_id!r} yet")
    out = m.outputs[output]
    df = spark.read.parquet(*[spark_uri(f.uri) for f in out.files])
    # Columns the job keeps for itself (a state partition column found in the paths).
    internal = [c for c in (out.meta or {}).get("internal_columns", []) if c in df.columns]
    return df.drop(*internal) if internal else df
