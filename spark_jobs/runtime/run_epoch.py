"""Run one whole epoch of a pipeline in one Spark application (embedded mode; an Airflow
DAG runs the same tasks one by one):

    python -m spark_jobs.runtime.run_epoch --jobs package.module:PIPELINE --storage URI
        --pipeline ID --data URI --run-id ID [--until YYYY-MM-DD] [--endpoint-url URL]
        [--remote sc://host:port]

``--jobs`` names a :class:`~spark_jobs.runtime.driver.Pipeline`; ``--until`` bounds the
epoch's input (its data interval's end). Exit codes: 0 done (the JSON line says the epoch
and its status), 2 an error (one line), 3 the epoch was declined.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from datetime import date, timedelta

from checkpointing import Coordinator, open_storage
from checkpointing.coordination.epoch_begin import BeginOptions
from checkpointing.errors import CheckpointError

from .connect import SparkConnectError
from .driver import Pipeline, drive_epoch
from .errors import DeclineEpoch
from .session import spark_session


def _pipeline(ref: str) -> Pipeline:
    """The Pipeline ``package.module:NAME`` names; ValueError in one line otherwise."""
    module, _, name = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--jobs {ref}: {exc}") from None
    if not isinstance(found, Pipeline):
        raise ValueError(f"--jobs {ref} is a {type(found).__name__}, not a Pipeline")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run_epoch")
    ap.add_argument("--jobs", required=True, help="the pipeline's tasks, package.module:PIPELINE")
    ap.add_argument("--storage", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--until", help="the epoch's input end (its data interval's end)")
    ap.add_argument("--endpoint-url")
    ap.add_argument("--master")
    ap.add_argument("--remote", help="a Spark Connect server, sc://host:port")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    begin: BeginOptions = {}
    if a.until:
        end = date.fromisoformat(a.until)
        begin["data_interval"] = {"start": (end - timedelta(days=1)).isoformat(),
                                  "end": end.isoformat()}
    try:
        pipeline = _pipeline(a.jobs)
        coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), a.pipeline)
        spark = spark_session(f"{a.pipeline}.epoch", a.master,
                              s3=a.data.startswith("s3") or a.storage.startswith("s3"),
                              endpoint_url=a.endpoint_url, remote=a.remote)
        epoch, meta = drive_epoch(pipeline, coord, spark, a.data, a.run_id,
                                  endpoint_url=a.endpoint_url, **begin)
    except DeclineEpoch as exc:
        print(f"run_epoch: epoch declined: {exc}", file=sys.stderr)
        return 3
    except (CheckpointError, SparkConnectError, ValueError) as exc:
        print(f"run_epoch: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"epoch_id": epoch, "status": meta.status if meta else "pending"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
