"""airport_ontime: a lakehouse pipeline that continues another one.

Scheduled on flights_daily's published Delta table ``gold_flights_enriched`` (its asset
event is emitted when an epoch of flights_daily commits a version), it reads that table
incrementally: each epoch pins the table's newest version in its barrier (at least the
version of the event that triggered it) and reads only the rows added and removed since the
version its previous epoch consumed (``run.table_changes``), so every retry of an epoch reads
the same change whatever flights_daily commits meanwhile. It publishes on-time performance
per departure airport over a rolling week as the Delta table ``gold_airport_ontime``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG
from dag_checkpoints import (
    CheckpointedSparkOperator,
    CheckpointSettings,
    checkpoint_dag,
    published_asset,
)

from checkpointing import CheckpointConfig, TableInput

settings = CheckpointSettings(
    pipeline_id="airport_ontime",
    config=CheckpointConfig(retained_epochs=2, timeout_seconds=float(
        os.environ.get("AIRPORT_ONTIME_EPOCH_TIMEOUT_SECONDS", 3600))),
)
# flights_daily publishes its gold tables under the data root's tables/ (spark_jobs.flights.
# stats.gold_table); this DAG reads one of them where it lies.
ENRICHED = TableInput(f"{settings.data.rstrip('/') or 'file:///tmp/ckpt-data'}"
                      "/tables/gold_flights_enriched")

with DAG(
    dag_id="airport_ontime",
    description="On-time performance per airport over a rolling week, read incrementally "
                "from flights_daily's gold_flights_enriched table",
    schedule=[published_asset("flights_daily", "gold_flights_enriched")],
    start_date=datetime(2013, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": int(os.environ.get("FLIGHTS_RETRIES", 2)),
                  "retry_delay": timedelta(seconds=float(
                      os.environ.get("FLIGHTS_RETRY_DELAY_SECONDS", 60)))},
    tags=["checkpointed", "spark", "downstream"],
) as dag:
    CheckpointedSparkOperator(
        task_id="ontime", job="spark_jobs.flights.airport_ontime:ontime",
        outputs=["gold_airport_ontime"], table_inputs={"flights": ENRICHED})
    checkpoint_dag(dag, settings)
