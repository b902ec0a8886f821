"""The command line every job shares, so each runs unchanged under spark-submit:

    spark-submit spark_jobs/ingest_flights.py --storage URI --pipeline ID --data URI \\
        --epoch N --task ingest_flights --attempt 1
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from checkpointing import Coordinator, open_storage
from checkpointing.errors import CheckpointError

from .harness import DeclineEpoch, Job, run_task, spark_session


def main(job: Job, name: str, argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=name)
    ap.add_argument("--storage", required=True, help="checkpoint storage URI")
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--data", required=True, help="data root URI (raw zone)")
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--task", default=name)
    ap.add_argument("--attempt", type=int, default=1)
    ap.add_argument("--endpoint-url")
    ap.add_argument("--master", help="default: spark-submit's, else local[2]")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), a.pipeline)
        spark = spark_session(f"{a.pipeline}.{a.task}", a.master,
                              s3=a.data.startswith("s3") or a.storage.startswith("s3"),
                              endpoint_url=a.endpoint_url)
        ack = run_task(job, coord, a.epoch, a.task, a.attempt, spark, a.data,
                       endpoint_url=a.endpoint_url)
    except DeclineEpoch as exc:
        print(f"{name}: declined epoch {a.epoch}: {exc}", file=sys.stderr)
        return 3
    except CheckpointError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"task": a.task, "epoch": a.epoch, "attempt": ack.attempt,
                      "row_counts": ack.state_handle.row_counts}))
    return 0
