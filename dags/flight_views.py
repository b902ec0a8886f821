"""flight_views: incremental views, declared by their SQL, over flights_daily's table.

Scheduled on flights_daily's published Delta table ``gold_flights_enriched`` (as
airport_ontime is), each task is a view: a query of the kind a nightly job recomputes whole,
maintained instead from the rows the table added and removed since the version the previous
epoch read. No job code: the query is planned into incremental operators (grouped counts,
sums and maxima, per-value counts for COUNT(DISTINCT)), whose state is the task's
checkpointed state; each epoch records whether it maintained or recomputed the view, and
why (``ckpt show``, the Epochs page). The outputs are Delta tables merged by the GROUP BY
columns; the same query run as a batch over the table at the pinned version is their
definition (``verify_every`` checks it every few epochs).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from dag_checkpoints import CheckpointSettings, checkpoint_dag, published_asset

from checkpointing import CheckpointConfig, TableInput, TableSpec

settings = CheckpointSettings(
    pipeline_id="flight_views",
    config=CheckpointConfig(retained_epochs=2, timeout_seconds=float(
        os.environ.get("FLIGHT_VIEWS_EPOCH_TIMEOUT_SECONDS", 3600))),
)
TABLES = f"{settings.data.rstrip('/') or 'file:///tmp/ckpt-data'}/tables"
FLIGHTS = {"flights": TableInput(f"{TABLES}/gold_flights_enriched")}


@task.checkpointed_view(output="gold_route_delays", table_inputs=FLIGHTS,
                        table=TableSpec(f"{TABLES}/gold_route_delays"), verify_every=5)
def route_delays():
    """Per route: flights, late arrivals (more than 15 minutes) and the worst departure
    delay, over every day of the table."""
    return """
        SELECT origin, dest, COUNT(*) AS flights,
               SUM(CASE WHEN arr_delay > 15 THEN 1 ELSE 0 END) AS late,
               MAX(dep_delay) AS worst_dep_delay
        FROM flights
        GROUP BY origin, dest
    """


@task.checkpointed_view(output="gold_airline_reach", table_inputs=FLIGHTS,
                        table=TableSpec(f"{TABLES}/gold_airline_reach"))
def airline_reach():
    """Per airline: the destinations it flew to and its flights that departed."""
    return """
        SELECT airline, COUNT(DISTINCT dest) AS destinations, COUNT(*) AS departed
        FROM flights
        WHERE dep_time IS NOT NULL
        GROUP BY airline
    """


with DAG(
    dag_id="flight_views",
    description="Incremental views by SQL over flights_daily's gold_flights_enriched table",
    schedule=[published_asset("flights_daily", "gold_flights_enriched")],
    start_date=datetime(2013, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": int(os.environ.get("FLIGHTS_RETRIES", 2)),
                  "retry_delay": timedelta(seconds=float(
                      os.environ.get("FLIGHTS_RETRY_DELAY_SECONDS", 60)))},
    tags=["checkpointed", "spark", "views"],
) as dag:
    route_delays()
    airline_reach()
    checkpoint_dag(dag, settings)
