"""The README's DAG (the tutorial copies it into its DAG folder): one checkpointed task
counting each new file of clicks by day and page into a Delta table. tests/unit/test_docs.py
keeps the README's block equal to this file."""

from datetime import datetime

from airflow.sdk import dag, task
from dag_checkpoints import CheckpointSettings, checkpoint_dag

from spark_jobs.runtime import JobResult, TableSpec, spark_uri


@task.checkpointed_spark(outputs=["daily_clicks"])
def clicks(run):
    found = run.new_input("raw/clicks/", suffix=".json")   # files no epoch consumed yet
    table = TableSpec(run.data_root.uri("tables/daily_clicks"), "append")
    rows = 0
    if found.new:
        df = run.spark.read.json([spark_uri(run.data_root.uri(k)) for k in found.new])
        rows = run.write_table(df.groupBy("day", "page").count(), "daily_clicks", table)
    return JobResult(offsets=found.offsets, row_counts={"rows": rows})


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, max_active_runs=1)
def clickstream():
    clicks()


checkpoint_dag(clickstream(), CheckpointSettings(pipeline_id="clickstream"))
