"""Two checkpointed DAGs in one file, each with a pipeline id and a checkpoint storage of
its own (not the environment's CKPT_STORAGE): one api-server must serve each from its own
storage. Used by tests/system/test_airflow_failure_paths.py."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG
from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

from checkpointing import CheckpointConfig

for name in ("a", "b"):
    settings = CheckpointSettings(
        pipeline_id=f"failure_paths_{name}",
        storage=os.environ.get(f"CKPT_FP_STORAGE_{name.upper()}", ""),
        config=CheckpointConfig(timeout_seconds=900, tolerable_failed_epochs=0,
                                retained_epochs=1),
    )
    with DAG(dag_id=f"ckpt_fp_{name}", schedule="@daily", start_date=datetime(2024, 1, 1),
             end_date=datetime(2024, 12, 31), catchup=False, max_active_runs=1,
             default_args={"retries": 0}, tags=["checkpointed", "test"]) as dag:
        count = CheckpointedSparkOperator(task_id="count", outputs=["counts"],
                                          job="tests.failure_jobs:gated_count")
        total = CheckpointedSparkOperator(task_id="total", outputs=["total"],
                                          job="tests.failure_jobs:total")
        count >> total
        checkpoint_dag(dag, settings)
    globals()[f"dag_{name}"] = dag
