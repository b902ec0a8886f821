"""Run one whole epoch of the flights pipeline in one Spark application (embedded mode;
the Airflow DAG runs the same tasks one by one):

    python -m spark_jobs.flights.run_epoch --storage URI --data URI --run-id ID [--endpoint-url URL]
        [--remote sc://host:port]

The same as ``python -m spark_jobs.runtime.run_epoch --jobs
spark_jobs.flights.pipeline:PIPELINE --pipeline flights_daily``.
"""

from __future__ import annotations

import sys

from ..runtime.run_epoch import main as run_epoch_main
from .pipeline import PIPELINE


def main(argv: list[str] | None = None) -> int:
    return run_epoch_main(argv, PIPELINE, default_id="flights_daily")


if __name__ == "__main__":
    sys.exit(main())
