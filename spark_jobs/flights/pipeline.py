"""The flights pipeline's plan, and its embedded runner (one epoch in-process, what the
Airflow DAG does task by task)."""

from __future__ import annotations

from typing import Any

from checkpointing import Coordinator, EpochMetadata, plan_from_edges

from ..runtime import Job
from ..runtime.driver import Pipeline, drive_epoch
from .enrich import enrich
from .ingest_flights import ingest_flights
from .ingest_weather import ingest_weather
from .stats import carrier_stats, route_stats
from .validate import validate

EDGES: dict[str, list[str]] = {
    "ingest_flights": [],
    "ingest_weather": [],
    "enrich": ["ingest_flights", "ingest_weather"],
    "route_stats": ["ingest_flights"],
    "carrier_stats": ["ingest_flights"],
    "validate": ["ingest_flights", "route_stats", "carrier_stats", "enrich"],
}
PUBLISHING = {"enrich", "route_stats", "carrier_stats"}
JOBS: dict[str, Job] = {"ingest_flights": ingest_flights, "ingest_weather": ingest_weather,
                        "enrich": enrich, "route_stats": route_stats,
                        "carrier_stats": carrier_stats, "validate": validate}
PLAN = plan_from_edges(EDGES, PUBLISHING)
PIPELINE = Pipeline(EDGES, JOBS, PLAN)


def run_epoch(coordinator: Coordinator, spark: Any, data_uri: str, run_id: str,
              **kwargs: Any) -> tuple[int, EpochMetadata | None]:
    """Run (or resume) one epoch of the flights pipeline in-process: see
    :func:`spark_jobs.runtime.drive_epoch`."""
    return drive_epoch(PIPELINE, coordinator, spark, data_uri, run_id, **kwargs)
