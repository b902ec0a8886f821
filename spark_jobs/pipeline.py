"""The flights pipeline's plan, and an embedded runner that drives one epoch in-process
(what the Airflow DAG does task by task): begin, run each task in dependency order,
complete (which publishes the gold tables)."""

from __future__ import annotations

from typing import Any

from checkpointing import Coordinator, EpochMetadata, plan_from_edges

from .enrich import enrich
from .harness import Job, run_task
from .ingest_flights import ingest_flights
from .ingest_weather import ingest_weather
from .publish import commit
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


def run_epoch(coordinator: Coordinator, spark: Any, data_uri: str, run_id: str, *,
              attempt: int = 1, stop_after: str | None = None,
              epoch_id: int | None = None, endpoint_url: str | None = None,
              **begin: Any) -> tuple[int, EpochMetadata | None]:
    """Run (or resume, with ``epoch_id``) one epoch. ``stop_after`` leaves the epoch
    pending after that task acknowledged, as a crash would."""
    if epoch_id is None:
        epoch_id = coordinator.begin_epoch(PLAN, run_id, **begin).epoch_id
    for task in EDGES:  # insertion order is a topological order
        run_task(JOBS[task], coordinator, epoch_id, task, attempt, spark, data_uri,
                 endpoint_url=endpoint_url)
        if task == stop_after:
            return epoch_id, None
    return epoch_id, commit(coordinator, epoch_id)
