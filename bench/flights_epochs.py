"""Epochs of the flights pipeline driven without Airflow, shared by the pipeline bench and
the declarative-pipelines comparison: days of 2013, the statistics-only plan, and a driver
that runs a plan's tasks in order."""

from __future__ import annotations

import time
from datetime import date, timedelta
from typing import Any

from checkpointing import Coordinator, plan_from_edges
from spark_jobs.flights.pipeline import JOBS
from spark_jobs.runtime import run_task

DAY0 = date(2013, 1, 1)
STATS_EDGES = {"ingest_flights": [], "route_stats": ["ingest_flights"],
               "carrier_stats": ["ingest_flights"]}
STATS_PLAN = plan_from_edges(STATS_EDGES, {"route_stats", "carrier_stats"})


def day(n: int) -> date:
    """Day n of 2013, 1-based."""
    return DAY0 + timedelta(days=n - 1)


def interval_until(n: int) -> dict[str, str]:
    """The data interval whose epoch consumes the files of days before day n."""
    return {"start": day(n - 1).isoformat(), "end": day(n).isoformat()}


class Failed(Exception):
    pass


def _failing(job):
    def run(r):
        job(r)
        raise Failed("injected: the last task dies after its snapshot")
    return run


def run_plan(coord: Coordinator, spark, data_uri: str, edges: dict, plan: dict, run_id: str,
             until: int, *, fail: str | None = None, **begin: Any) -> tuple[int, float]:
    """Begin an epoch bounded at day ``until``, run its tasks in order (``fail`` dies after
    its snapshot), complete unless a task failed. Returns (epoch id, wall seconds)."""
    t0 = time.perf_counter()
    eid = coord.begin_epoch(plan, run_id, data_interval=interval_until(until), **begin).epoch_id
    for task in edges:
        job = _failing(JOBS[task]) if task == fail else JOBS[task]
        try:
            run_task(job, coord, eid, task, 1, spark, data_uri)
        except Failed:
            return eid, time.perf_counter() - t0
    coord.complete(eid)
    return eid, time.perf_counter() - t0
