"""Three checkpointed DAGs in one file, each with a pipeline id and a checkpoint storage of
its own (not the environment's CKPT_STORAGE): one api-server must serve each from its own
storage. ``ckpt_fp_c`` has a ``dagrun_timeout`` its count task outlasts. Used by
tests/system/test_airflow_failure_paths.py."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG
from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

from checkpointing import CheckpointConfig

#: ckpt_fp_c's DAG-run timeout: long enough for its begin step to open the epoch on a
#: loaded machine, short enough for a test
TIMEOUT_C = timedelta(seconds=60)
COUNT_JOB = {"a": "gated_count", "b": "gated_count", "c": "outlasting_count"}

for name in ("a", "b", "c"):
    settings = CheckpointSettings(
        pipeline_id=f"failure_paths_{name}",
        storage=os.environ.get(f"CKPT_FP_STORAGE_{name.upper()}", ""),
        config=CheckpointConfig(timeout_seconds=900, tolerable_failed_epochs=0,
                                retained_epochs=1),
    )
    with DAG(dag_id=f"ckpt_fp_{name}", schedule="@daily", start_date=datetime(2024, 1, 1),
             end_date=datetime(2024, 12, 31), catchup=False, max_active_runs=1,
             dagrun_timeout=TIMEOUT_C if name == "c" else None,
             default_args={"retries": 0}, tags=["checkpointed", "test"]) as dag:
        count = CheckpointedSparkOperator(task_id="count", outputs=["counts"],
                                          job=f"tests.support.failure_jobs:{COUNT_JOB[name]}")
        total = CheckpointedSparkOperator(task_id="total", outputs=["total"],
                                          job="tests.support.failure_jobs:total")
        count >> total
        checkpoint_dag(dag, settings)
    globals()[f"dag_{name}"] = dag
