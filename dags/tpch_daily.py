"""tpch_daily: TPC-H as a daily feed, one checkpointed epoch per day of orders.

Land it with ``python -m spark_jobs.tpch.landing`` (see README, "TPC-H at scale"): the
history up to a day in a few large files, then a file of orders and one of their line items
per order day, and optionally deletions of old orders. The first run consumes the history;
each later run the day before its logical date. Written against the provider's public API
only (the jobs are in ``spark_jobs/tpch/jobs.py``). Storage, data root and Spark mode come
from the environment as for flights_daily (CKPT_STORAGE, CKPT_DATA, CKPT_SPARK_MODE).
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

JOBS = "spark_jobs.tpch.jobs"
settings = CheckpointSettings(
    pipeline_id="tpch_daily",
    config=CheckpointConfig(
        timeout_seconds=float(os.environ.get("TPCH_EPOCH_TIMEOUT_SECONDS", 3 * 3600)),
        retained_epochs=int(os.environ.get("TPCH_RETAINED_EPOCHS", 3)),
    ),
    daily_inputs=("raw/orders/{data_day}.parquet", "raw/lineitem/{data_day}.parquet"),
)

with DAG(
    dag_id="tpch_daily",
    description="TPC-H orders as a daily feed: Q1, Q5 and top customers, exactly once",
    schedule="@daily",
    start_date=datetime(1992, 1, 1),
    end_date=datetime(1998, 8, 3),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": int(os.environ.get("TPCH_RETRIES", 2)),
                  "retry_delay": timedelta(seconds=30)},
    tags=["checkpointed", "spark", "tpch"],
    deadline=deadline_alert(settings),
) as dag:
    ingest = CheckpointedSparkOperator(task_id="ingest", job=f"{JOBS}:ingest")
    q1 = CheckpointedSparkOperator(task_id="q1_pricing", job=f"{JOBS}:q1_pricing",
                                   outputs=["tpch_q1_pricing"])
    q5 = CheckpointedSparkOperator(task_id="q5_revenue", job=f"{JOBS}:q5_revenue",
                                   outputs=["tpch_q5_revenue"])
    top = CheckpointedSparkOperator(task_id="top_customers", job=f"{JOBS}:top_customers",
                                    outputs=["tpch_top_customers"])
    ingest >> [q1, q5, top]
    checkpoint_dag(dag, settings)
