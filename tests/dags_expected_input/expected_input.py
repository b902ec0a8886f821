"""A checkpointed DAG whose one job expects its data day's file (``expects=``) and may wait
for it ``EXPECTED_GRACE_SECONDS``. Used by tests/system/test_expected_input.py."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG
from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

from checkpointing import CheckpointConfig

settings = CheckpointSettings(pipeline_id="expected_input",
                              config=CheckpointConfig(timeout_seconds=600),
                              daily_inputs=("raw/readings/{data_day}.csv",))
with DAG(dag_id="ckpt_expected_input", schedule="@daily", start_date=datetime(2024, 1, 1),
         catchup=False, default_args={"retries": 0}, tags=["checkpointed", "test"]) as dag:
    CheckpointedSparkOperator(
        task_id="readings", job="tests.support.failure_jobs:count_landed", outputs=["landed"],
        expects=settings.daily_inputs,
        input_grace=float(os.environ.get("EXPECTED_GRACE_SECONDS", "5")))
    checkpoint_dag(dag, settings)
