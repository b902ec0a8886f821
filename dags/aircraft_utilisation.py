"""aircraft_utilisation: how much each aircraft (tail number) flew, kept up to date day by day.

A second checkpointed pipeline, written only against the public API in the TaskFlow style:
two ``@task.checkpointed_spark`` functions, wired with ``>>``; ``checkpoint_dag`` derives the
epoch's plan from them and adds the begin, timeout and commit steps.

- ``tail_delta`` reads the raw flight files of the run's data interval that no earlier epoch
  consumed (``run.new_input``: a week's window of seen files and an index of every file
  consumed) and writes this epoch's change of flights, distance and air time per tail
  number; a corrected file (rewritten, however old) has its old contribution retracted;
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
from spark_jobs.runtime import JobResult, JobRun, TableSpec, partition_value, spark_uri

RAW = "raw/flights/"
DELTA_SCHEMA = "tailnum string, flights long, distance double, air_time double"
CONTRIB_SCHEMA = ("source_file string, tailnum string, flights long, distance double, "
                  "air_time double")
TOTALS_SCHEMA = ("tailnum string, flights long, distance double, air_time double, "
                 "manufacturer string, model string, seats int, year_built int")

settings = CheckpointSettings(
    pipeline_id="aircraft_utilisation",
    config=CheckpointConfig(timeout_seconds=float(os.environ.get(
        "AIRCRAFT_EPOCH_TIMEOUT_SECONDS", 3600)), retained_epochs=2),
)


@task.checkpointed_spark
def tail_delta(run: JobRun) -> JobResult:
    """This epoch's change of flights, distance and air time per tail number: what the new
    files contribute, minus what the files they replace contributed before.

    The corrections recipe: keep each raw file's contribution in the state, by the day the
    file is named for (``contrib/part=<day>``). ``run.new_input`` names the files to read
    and, among them, those that rewrite a file consumed before (``replaced``, whatever its
    age); their old contribution is read back from the state and retracted. Days no file
    touched are carried by reference, so an epoch reads and writes only its own days."""
    from pyspark.sql import functions as F

    found = run.new_input(RAW)  # the run's data interval end bounds it
    days = {_day(k) for k in found.new}
    before = run.read_parquet([f for f in run.files(run.previous, "contrib/")
                               if partition_value(f.name) in days], CONTRIB_SCHEMA)
    retracted = before.where(F.col("source_file").isin(found.replaced))
    if found.new:
        flights = (run.spark.read.option("header", True).option("mode", "DROPMALFORMED")
                   .schema("year int, month int, day int, dep_time double, "
                           "sched_dep_time int, dep_delay double, arr_time double, "
                           "sched_arr_time int, arr_delay double, carrier string, "
                           "flight int, tailnum string, origin string, dest string, "
                           "air_time double, distance double, hour int, minute int, "
                           "time_hour string")
                   .csv([spark_uri(run.data_root.uri(k)) for k in found.new]))
        name = F.element_at(F.split(F.input_file_name(), "/"), -1)
        fresh = (flights.where(F.col("tailnum").isNotNull() & F.col("dep_time").isNotNull())
                 .withColumn("source_file", F.concat(F.lit(RAW), name))
                 .groupBy("source_file", "tailnum")
                 .agg(F.count(F.lit(1)).alias("flights"),
                      F.sum("distance").alias("distance"),
                      F.sum(F.coalesce("air_time", F.lit(0.0))).alias("air_time")))
    else:
        fresh = run.spark.createDataFrame([], CONTRIB_SCHEMA)
    fresh = fresh.cache()
    # The state: the untouched days by reference, the touched days rewritten whole.
    run.carry_partitions("contrib", run.partitions(run.previous, "contrib") - days)
    if days:
        kept = before.where(~F.col("source_file").isin(found.replaced))
        run.write_state(kept.unionByName(fresh).withColumn(
            "file_day", F.regexp_extract("source_file", r"(\d{4}-\d{2}-\d{2})\.csv$", 1)),
            "contrib", "file_day")
    sign = [F.col("tailnum")] + [(-F.col(c)).alias(c) for c in ("flights", "distance",
                                                                "air_time")]
    delta = (fresh.drop("source_file").unionByName(retracted.select(*sign))
             .groupBy("tailnum").agg(F.sum("flights").alias("flights"),
                                     F.sum("distance").alias("distance"),
                                     F.sum("air_time").alias("air_time")))
    refs = run.write_state(delta.coalesce(1), "delta")
    return JobResult(offsets=found.offsets,
                     row_counts={"files_new": len(found.new),
                                 "files_replaced": len(found.replaced)},
                     metrics={"delta_files": len(refs), "days_touched": sorted(days)})


def _day(key: str) -> str:
    """The day a raw file is named for (``raw/flights/2013-01-05.csv``)."""
    return key.rsplit("/", 1)[-1].removesuffix(".csv")


@task.checkpointed_spark(outputs=["gold_aircraft_utilisation"])
def utilisation(run: JobRun) -> JobResult:
    """Running totals per aircraft: the previous epoch's plus this epoch's delta."""
    from pyspark.sql import functions as F

    previous = run.read_parquet(run.files(run.previous, "totals/"), TOTALS_SCHEMA)
    delta = run.read_parquet(run.files(run.upstream["tail_delta"], "delta/"), DELTA_SCHEMA)
    summed = (previous.select("tailnum", "flights", "distance", "air_time")
              .unionByName(delta).groupBy("tailnum")
              .agg(F.sum("flights").alias("flights"), F.sum("distance").alias("distance"),
                   F.sum("air_time").alias("air_time"))
              .where(F.col("flights") > 0))  # every flight of the tail was corrected away
    planes = (run.spark.read.option("header", True)
              .schema("tailnum string, year int, type string, manufacturer string, "
                      "model string, engines int, seats int, speed double, engine string")
              .csv(run.data_uri("raw/dims/planes.csv"))
              .select("tailnum", "manufacturer", "model", "seats",
                      F.col("year").alias("year_built")))
    totals = summed.join(planes, "tailnum", "left").select(*[
        c.split()[0] for c in TOTALS_SCHEMA.split(", ")])
    totals = totals.coalesce(1).cache()
    run.write_state(totals, "totals")
    n = totals.count()
    # Published as a Delta table that any engine reads; each epoch replaces its content.
    run.write_table(totals, "gold_aircraft_utilisation",
                    TableSpec(run.data_root.uri("tables/gold_aircraft_utilisation"), "overwrite"),
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
