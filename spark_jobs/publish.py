"""publish: phase two of the two-phase publish, and how consumers read the result.

The commit step completes the epoch: once every task acknowledged, the coordinator writes
the epoch's ``_metadata`` and atomically replaces the published manifest with the gold
tables the publishing tasks staged. Readers use :func:`read_published`, which resolves the
manifest, so they never see output of an incomplete epoch.

    python -m spark_jobs.publish --storage URI --pipeline ID --epoch N
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from checkpointing import Coordinator, EpochMetadata, open_storage, read_manifest
from checkpointing.errors import CheckpointError

from .harness import spark_uri


def commit(coordinator: Coordinator, epoch_id: int) -> EpochMetadata:
    """Complete the epoch (publishing its outputs); raises EpochIncomplete naming the
    tasks that have not acknowledged."""
    return coordinator.complete(epoch_id)


def read_published(spark: Any, coordinator: Coordinator, output: str):
    """The currently published version of a gold table, as a Spark DataFrame."""
    m = read_manifest(coordinator.storage, coordinator.layout)
    if m is None or output not in m.outputs:
        raise CheckpointError(f"nothing published as {output!r} for pipeline "
                              f"{coordinator.pipeline_id!r} yet")
    return spark.read.parquet(*[spark_uri(f.uri) for f in m.outputs[output].files])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="publish")
    ap.add_argument("--storage", required=True)
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--endpoint-url")
    a = ap.parse_args(argv)
    try:
        coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), a.pipeline)
        meta = commit(coord, a.epoch)
    except CheckpointError as exc:
        print(f"publish: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"epoch_id": meta.epoch_id, "status": meta.status,
                      "reason": meta.reason}))
    return 0 if meta.completed else 1


if __name__ == "__main__":
    sys.exit(main())
