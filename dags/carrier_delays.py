"""carrier_delays: a checkpointed pipeline over a bronze table that plain Spark maintains.

``bronze_flight_status`` is written outside Airflow's checkpoints by a Spark job of its own
(``spark_jobs/flights/bronze_status.py``: MERGE, then DELETE with deletion vectors on; in
the demo, ``make demo`` runs it). That writer announces each update as an event of the
Airflow asset ``bronze_flight_status`` (Airflow's REST API: ``POST /api/v2/assets/events``),
which schedules this DAG. Each epoch pins the table's newest version and reads only the
rows added and removed since the version its previous epoch consumed, the rows a deletion
vector removed among them, and publishes delays per carrier as ``gold_carrier_delays``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset
from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

from checkpointing import CheckpointConfig, TableInput

settings = CheckpointSettings(pipeline_id="carrier_delays",
                              config=CheckpointConfig(retained_epochs=2))
BRONZE = TableInput(f"{settings.data.rstrip('/') or 'file:///tmp/ckpt-data'}"
                    "/tables/bronze_flight_status")
#: the bronze writer's announcements (an asset by name: no location in Airflow)
BRONZE_UPDATED = Asset(name="bronze_flight_status", uri="x-bronze://flight_status")

with DAG(
    dag_id="carrier_delays",
    description="Arrival delays per carrier, read incrementally from a bronze Delta table "
                "that plain Spark maintains with deletion vectors",
    schedule=[BRONZE_UPDATED],
    start_date=datetime(2013, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": int(os.environ.get("FLIGHTS_RETRIES", 2)),
                  "retry_delay": timedelta(seconds=float(
                      os.environ.get("FLIGHTS_RETRY_DELAY_SECONDS", 60)))},
    tags=["checkpointed", "spark", "lakehouse"],
) as dag:
    CheckpointedSparkOperator(
        task_id="carrier_delays", job="spark_jobs.flights.carrier_delays:carrier_delays",
        outputs=["gold_carrier_delays"], table_inputs={"status": BRONZE})
    checkpoint_dag(dag, settings)
