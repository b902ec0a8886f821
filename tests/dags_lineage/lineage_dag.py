"""A checkpointed DAG for the lineage test: ``readings`` appends each day's landed file to a
Delta table; ``summary`` reads that table as a table input (the version the epoch's
barrier pinned). Used by tests/system/test_lineage.py."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG
from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

from checkpointing import CheckpointConfig, TableInput

settings = CheckpointSettings(pipeline_id="lineage_test",
                              config=CheckpointConfig(timeout_seconds=600))
with DAG(dag_id="ckpt_lineage", schedule="@daily", start_date=datetime(2024, 1, 1),
         catchup=False, default_args={"retries": 0}, tags=["checkpointed", "test"]) as dag:
    readings = CheckpointedSparkOperator(task_id="readings", outputs=["landed"],
                                         job="tests.support.failure_jobs:landed_table")
    summary = CheckpointedSparkOperator(
        task_id="summary", outputs=["summary"], job="tests.support.failure_jobs:landed_summary",
        table_inputs={"landed": TableInput(os.environ.get("CKPT_DATA", "file:///nowhere")
                                           + "/tables/landed")})
    checkpoint_dag(dag, settings)
