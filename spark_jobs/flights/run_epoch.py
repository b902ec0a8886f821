"""Run one whole epoch of the flights pipeline in one Spark application (embedded mode;
the Airflow DAG runs the same tasks one by one):

    python -m spark_jobs.flights.run_epoch --storage URI --data URI --run-id ID [--endpoint-url URL]
        [--remote sc://host:port]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from checkpointing import Coordinator, open_storage
from checkpointing.errors import CheckpointError

from ..runtime import DeclineEpoch, SparkConnectError, spark_session
from .pipeline import run_epoch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run_epoch")
    ap.add_argument("--storage", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--pipeline", default="flights_daily")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--endpoint-url")
    ap.add_argument("--master")
    ap.add_argument("--remote", help="a Spark Connect server, sc://host:port")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), a.pipeline)
        spark = spark_session(f"{a.pipeline}.epoch", a.master,
                              s3=a.data.startswith("s3") or a.storage.startswith("s3"),
                              endpoint_url=a.endpoint_url, remote=a.remote)
        epoch, meta = run_epoch(coord, spark, a.data, a.run_id, endpoint_url=a.endpoint_url)
    except DeclineEpoch as exc:
        print(f"run_epoch: epoch declined: {exc}", file=sys.stderr)
        return 3
    except (CheckpointError, SparkConnectError) as exc:
        print(f"run_epoch: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"epoch_id": epoch, "status": meta.status if meta else "pending"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
