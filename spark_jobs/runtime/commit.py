"""The commit step outside Airflow: complete an epoch (phase two of the two-phase publish).

Once every task acknowledged, the coordinator writes the epoch's ``_metadata`` and atomically
replaces the published manifest with the outputs the publishing tasks staged; readers use
:func:`spark_jobs.runtime.read_published`.

    python -m spark_jobs.runtime.commit --storage URI --pipeline ID --epoch N
"""

from __future__ import annotations

import argparse
import json
import sys

from checkpointing import Coordinator, EpochMetadata, open_storage
from checkpointing.errors import CheckpointError


def commit(coordinator: Coordinator, epoch_id: int) -> EpochMetadata:
    """Complete the epoch (publishing its outputs); raises EpochIncomplete naming the
    tasks that have not acknowledged."""
    return coordinator.complete(epoch_id)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="commit")
    ap.add_argument("--storage", required=True)
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--endpoint-url")
    a = ap.parse_args(argv)
    try:
        coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), a.pipeline)
        meta = commit(coord, a.epoch)
    except CheckpointError as exc:
        print(f"commit: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"epoch_id": meta.epoch_id, "status": meta.status,
                      "reason": meta.reason}))
    return 0 if meta.completed else 1


if __name__ == "__main__":
    sys.exit(main())
