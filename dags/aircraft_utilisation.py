"""aircraft_utilisation: how much each aircraft (tail number) flew, kept up to date day by day.

A second checkpointed pipeline, written only against the public API in the TaskFlow style:
two ``@task.checkpointed_spark`` functions, wired with ``>>``; ``checkpoint_dag`` derives the
epoch's plan from them and adds the begin, timeout and commit steps.

- ``tail_delta`` reads the raw flight files of the run's data interval that no earlier epoch
  consumed (its offsets: the runtime's ``new_input``, a week's window of seen files) and
  writes this epoch's flights, distance and air time per tail number;
- ``utilisation`` restores the running totals of the previous epoch, adds the delta, joins
  the aircraft register (``raw/dims/planes.csv``) and publishes ``gold_aircraft_utilisation``.

A retry restores the previous epoch's totals again, so a task that failed after writing its
state never counts a flight twice.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import dag, task
from dag_checkpoints import CheckpointSettings, checkpoint_dag

from checkpointing import CheckpointConfig
from spark_jobs.runtime import JobResult, JobRun, TableSpec, new_input, spark_uri

RAW = "raw/flights/"
DELTA_SCHEMA = "tailnum string, flights long, distance double, air_time double"
TOTALS_SCHEMA = ("tailnum string, flights long, distance double, air_time double, "
                 "manufacturer string, model string, seats int, year_built int")

settings = CheckpointSettings(
    pipeline_id="aircraft_utilisation",
    config=CheckpointConfig(timeout_seconds=float(os.environ.get(
        "AIRCRAFT_EPOCH_TIMEOUT_SECONDS", 3600)), retained_epochs=2),
)


@task.checkpointed_spark
def tail_delta(run: JobRun) -> JobResult:
    """This epoch's flights per tail number, from raw files not consumed before."""
    from pyspark.sql import functions as F

    # Files landed since the previous epoch's offsets (a week's window of seen files, as
    # Spark's file source keeps), up to the run's data interval end. This job only adds, so
    # a file rewritten while in the window is not read again; a late file (named for a past
    # day) is read, as is one rewritten after it left the window (flights' source job
    # retracts the old rows of those instead: spark_jobs/flights/source_job.py).
    found = new_input(run.data, RAW, run.previous.offsets if run.previous else None,
                      until=run.input_until)
    new = [k for k in found.new if k not in found.replaced]
    if new:
        flights = (run.spark.read.option("header", True).option("mode", "DROPMALFORMED")
                   .schema("year int, month int, day int, dep_time double, "
                           "sched_dep_time int, dep_delay double, arr_time double, "
                           "sched_arr_time int, arr_delay double, carrier string, "
                           "flight int, tailnum string, origin string, dest string, "
                           "air_time double, distance double, hour int, minute int, "
                           "time_hour string")
                   .csv([spark_uri(run.data.uri(k)) for k in new]))
        delta = (flights.where(F.col("tailnum").isNotNull() & F.col("dep_time").isNotNull())
                 .groupBy("tailnum")
                 .agg(F.count(F.lit(1)).alias("flights"),
                      F.sum("distance").alias("distance"),
                      F.sum(F.coalesce("air_time", F.lit(0.0))).alias("air_time")))
    else:
        delta = run.spark.createDataFrame([], DELTA_SCHEMA)
    refs = run.write_state(delta.coalesce(1), "delta")
    return JobResult(offsets=found.offsets,
                     row_counts={"files_new": len(new), "tails": delta.count()},
                     metrics={"delta_files": len(refs)})


@task.checkpointed_spark(outputs=["gold_aircraft_utilisation"])
def utilisation(run: JobRun) -> JobResult:
    """Running totals per aircraft: the previous epoch's plus this epoch's delta."""
    from pyspark.sql import functions as F

    previous = run.read_parquet(run.files(run.previous, "totals/"), TOTALS_SCHEMA)
    delta = run.read_parquet(run.files(run.upstream["tail_delta"], "delta/"), DELTA_SCHEMA)
    summed = (previous.select("tailnum", "flights", "distance", "air_time")
              .unionByName(delta).groupBy("tailnum")
              .agg(F.sum("flights").alias("flights"), F.sum("distance").alias("distance"),
                   F.sum("air_time").alias("air_time")))
    planes = (run.spark.read.option("header", True)
              .schema("tailnum string, year int, type string, manufacturer string, "
                      "model string, engines int, seats int, speed double, engine string")
              .csv(spark_uri(run.data.uri("raw/dims/planes.csv")))
              .select("tailnum", "manufacturer", "model", "seats",
                      F.col("year").alias("year_built")))
    totals = summed.join(planes, "tailnum", "left").select(*[
        c.split()[0] for c in TOTALS_SCHEMA.split(", ")])
    totals = totals.coalesce(1).cache()
    run.write_state(totals, "totals")
    n = totals.count()
    # Published as a Delta table that any engine reads; each epoch replaces its content.
    run.write_table(totals, "gold_aircraft_utilisation",
                    TableSpec(run.data.uri("tables/gold_aircraft_utilisation"), "overwrite"),
                    rows=n)
    return JobResult(row_counts={"aircraft": n, "tails_updated": delta.count()})


@dag(
    dag_id="aircraft_utilisation",
    description="Per-aircraft utilisation from NYC flights 2013, checkpointed day by day",
    schedule="@daily",
    start_date=datetime(2013, 1, 1),
    end_date=datetime(2013, 12, 31),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": int(os.environ.get("AIRCRAFT_RETRIES", 2)),
                  "retry_delay": timedelta(seconds=5)},
    tags=["checkpointed", "spark", "example"],
)
def aircraft_utilisation():
    tail_delta() >> utilisation()


aircraft_dag = aircraft_utilisation()
checkpoint_dag(aircraft_dag, settings)
