"""The flights pipeline's plan, and an embedded runner that drives one epoch in-process
(what the Airflow DAG does task by task): begin, run each task in dependency order,
complete (which publishes the gold tables)."""

from __future__ import annotations

import logging
from typing import Any

from checkpointing import Coordinator, EpochMetadata, plan_from_edges
from checkpointing.lease import RunnerLease

from ..runtime import Job, commit, run_task
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
log = logging.getLogger("spark_jobs.flights.pipeline")


def run_epoch(coordinator: Coordinator, spark: Any, data_uri: str, run_id: str, *,
              attempt: int | None = None, stop_after: str | None = None,
              epoch_id: int | None = None, endpoint_url: str | None = None,
              **begin: Any) -> tuple[int, EpochMetadata | None]:
    """Run one epoch for ``run_id``, or resume it.

    A run that already completed its epoch answers with it and runs nothing; a run whose
    epoch is still open (its driver died) resumes that epoch: tasks that acknowledged are not
    run again, the others run as the next attempt (which fences the dead driver's). While
    this process drives the epoch it renews the epoch's lease, so that another run can
    abort it as ``runner_lost`` if this process dies (PROTOCOL 6.1). ``stop_after`` leaves
    the epoch pending after that task acknowledged, as a crash would."""
    if epoch_id is None:
        lineage = str(begin.get("lineage") or "main")
        done = coordinator.completed_epoch_of_run(run_id, lineage)
        if done is not None:
            log.info("run %s already completed epoch %d: nothing to run", run_id, done)
            return done, coordinator.metadata(done)
        open_epoch = coordinator.open_epoch_for_run(run_id, lineage)
        epoch_id = (open_epoch.epoch_id if open_epoch is not None
                    else coordinator.begin_epoch(PLAN, run_id, **begin).epoch_id)
    if attempt is None:
        attempt = coordinator.next_attempt(epoch_id)
    with RunnerLease(coordinator, epoch_id):
        for task in EDGES:  # insertion order is a topological order
            run_task(JOBS[task], coordinator, epoch_id, task, attempt, spark, data_uri,
                     endpoint_url=endpoint_url)
            if task == stop_after:
                return epoch_id, None
        return epoch_id, commit(coordinator, epoch_id)
