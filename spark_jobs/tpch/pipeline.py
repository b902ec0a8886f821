"""tpch_daily's plan, and its embedded runner (one epoch in-process, what the Airflow DAG
does task by task)."""

from __future__ import annotations

from typing import Any

from checkpointing import Coordinator, EpochMetadata, plan_from_edges

from ..runtime import Job
from ..runtime.driver import Pipeline, drive_epoch
from .jobs import ingest, q1_pricing, q5_revenue, top_customers

EDGES: dict[str, list[str]] = {
    "ingest": [],
    "q1_pricing": ["ingest"],
    "q5_revenue": ["ingest"],
    "top_customers": ["ingest"],
}
PUBLISHING = {"q1_pricing", "q5_revenue", "top_customers"}
JOBS: dict[str, Job] = {"ingest": ingest, "q1_pricing": q1_pricing,
                        "q5_revenue": q5_revenue, "top_customers": top_customers}
PLAN = plan_from_edges(EDGES, PUBLISHING)
PIPELINE = Pipeline(EDGES, JOBS, PLAN)
OUTPUTS = ("tpch_q1_pricing", "tpch_q5_revenue", "tpch_top_customers")


def run_epoch(coordinator: Coordinator, spark: Any, data_uri: str, run_id: str,
              **kwargs: Any) -> tuple[int, EpochMetadata | None]:
    """Run (or resume) one epoch of tpch_daily in-process: see
    :func:`spark_jobs.runtime.drive_epoch`."""
    return drive_epoch(PIPELINE, coordinator, spark, data_uri, run_id, **kwargs)
