"""A checkpointed DAG whose one job reads an upstream Delta table incrementally and expects a
new version of it in every epoch (``TableInput(expect_new_version=True)``), waiting up to
``EXPECTED_GRACE_SECONDS``. Used by tests/system/test_expected_input.py."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG
from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

from checkpointing import CheckpointConfig, TableInput

settings = CheckpointSettings(pipeline_id="expected_table",
                              config=CheckpointConfig(timeout_seconds=600,
                                                      tolerable_failed_epochs=5))
with DAG(dag_id="ckpt_expected_table", schedule="@daily", start_date=datetime(2024, 1, 1),
         catchup=False, default_args={"retries": 0}, tags=["checkpointed", "test"]) as dag:
    CheckpointedSparkOperator(
        task_id="summary", outputs=["summary"], job="tests.support.failure_jobs:landed_summary",
        table_inputs={"landed": TableInput(os.environ.get("CKPT_DATA", "file:///nowhere")
                                           + "/tables/landed", expect_new_version=True)},
        input_grace=float(os.environ.get("EXPECTED_GRACE_SECONDS", "5")))
    checkpoint_dag(dag, settings)
