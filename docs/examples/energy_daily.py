"""energy_daily: a user's own checkpointed pipeline, the worked example of docs/JOBS.md.

Smart meters send one CSV file per day, ``raw/readings/<YYYY-MM-DD>.csv`` under the data
root (columns ``meter_id, site, ts, kwh``); a meter operator sometimes re-sends a day's
file with corrected readings, days or months later. Three tasks, one epoch per daily run:

- ``readings`` keeps every accepted reading as state, partitioned by the day its file is
  named for; a file that rewrites one consumed before (a correction, whatever its age)
  replaces that file's rows; rows that do not parse are quarantined and counted;
- ``daily_usage`` publishes kWh per site and day as a Delta table partitioned by day,
  recomputing only the days ``readings`` touched (``replace_partitions``);
- ``site_records`` publishes, per site, its total and its highest day (a record a
  correction may lower, so it is recomputed from ``daily_usage``'s daily totals, not
  merged) as a small Delta table replaced each epoch (``overwrite``).

Copy this file into your DAGs folder, set ``CKPT_STORAGE`` and ``CKPT_DATA`` (and for
Spark Connect ``CKPT_SPARK_MODE=connect`` with a ``spark_connect`` connection), and run it.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task
from dag_checkpoints import CheckpointSettings, checkpoint_dag

from spark_jobs.runtime import DeclineEpoch, JobResult, JobRun, TableSpec, spark_uri

RAW = "raw/readings/"
READING = "meter_id string, site string, ts timestamp, kwh double, file_day string"

settings = CheckpointSettings(pipeline_id="energy_daily",
                              daily_inputs=(RAW + "{data_day}.csv",))


def daily_table(run: JobRun) -> TableSpec:
    return TableSpec(run.data_root.uri("tables/energy_daily_usage"), "replace_partitions", ("day",))


@task.checkpointed_spark(outputs=["quarantine"])
def readings(run: JobRun) -> JobResult:
    """Accepted readings by file day; corrections replace the rows of the file they rewrite."""
    from pyspark.sql import functions as F

    found = run.new_input(RAW)  # new files up to the run's data interval end
    days = sorted({k.rsplit("/", 1)[-1].removesuffix(".csv") for k in found.new})
    # The days this epoch touches are rebuilt whole; every other day is carried as is.
    run.carry_partitions("readings", run.partitions(run.previous, "readings") - set(days))
    quarantined = 0
    if days:
        raw = (run.spark.read.option("header", True)
               .schema("meter_id string, site string, ts string, kwh string")
               .csv([spark_uri(run.data_root.uri(k)) for k in found.new])
               .withColumn("file_day", F.regexp_extract(F.input_file_name(),
                                                        r"(\d{4}-\d{2}-\d{2})\.csv$", 1)))
        # try_*: a value that does not parse is null (Spark's ANSI mode would fail the
        # whole job), and its row goes to quarantine.
        typed = (raw.withColumn("ts_parsed", F.try_to_timestamp("ts"))
                 .withColumn("kwh_parsed", F.col("kwh").try_cast("double")))
        ok = F.coalesce(F.col("meter_id").isNotNull() & F.col("ts_parsed").isNotNull()
                        & (F.col("kwh_parsed") >= 0), F.lit(False))
        good = typed.where(ok).select("meter_id", "site", F.col("ts_parsed").alias("ts"),
                                      F.col("kwh_parsed").alias("kwh"), "file_day")
        bad = typed.where(~ok).select("meter_id", "site", "ts", "kwh", "file_day")
        quarantined, total = bad.count(), raw.count()
        if quarantined > 0.1 * max(total, 1):
            raise DeclineEpoch(f"{quarantined} of {total} readings malformed (more than "
                               "10 %): fix the files and re-send them")
        # One file per day: a touched day's rows are its (new or corrected) file's, so a
        # correction replaces the old rows of its day, whatever the day's age.
        run.write_state(good.dropDuplicates(["meter_id", "ts"]), "readings", "file_day")
        run.write_output(bad, "quarantine", rows=quarantined)
    else:
        run.stage_empty("quarantine")
    return JobResult(offsets=found.offsets,
                     row_counts={"files_new": len(found.new),
                                 "files_replaced": len(found.replaced),
                                 "rows_quarantined": quarantined},
                     metrics={"days_touched": days})


@task.checkpointed_spark(outputs=["energy_daily_usage"])
def daily_usage(run: JobRun) -> JobResult:
    """kWh per site and day, the days ``readings`` touched recomputed in full."""
    from pyspark.sql import functions as F

    upstream = run.upstream["readings"]
    days = upstream.metrics.get("days_touched", [])
    table = daily_table(run)
    if not days:
        run.keep_table("energy_daily_usage", table)
        return JobResult(row_counts={"days_recomputed": 0})
    refs = [f for f in run.files(upstream, "readings/")
            if f.name.split("/")[1].removeprefix("part=") in days]
    daily = (run.read_parquet(refs, READING)
             .groupBy("site", F.col("file_day").alias("day"))
             .agg(F.sum("kwh").alias("kwh"), F.count(F.lit(1)).alias("readings")))
    # A day whose readings were all corrected away is replaced by nothing.
    run.write_table(daily, "energy_daily_usage", table, replaced=days)
    return JobResult(row_counts={"days_recomputed": len(days)})


@task.checkpointed_spark(outputs=["energy_site_records"])
def site_records(run: JobRun) -> JobResult:
    """Per site: total kWh, and the day with the most (from the daily totals)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # The upstream table's whole content after this epoch, as its state handle lists it.
    daily = run.read_table(run.upstream["daily_usage"], "energy_daily_usage")
    best = Window.partitionBy("site").orderBy(F.desc("kwh"), "day")
    records = (daily.withColumn("rank", F.row_number().over(best))
               .groupBy("site").agg(F.sum("kwh").alias("total_kwh"),
                                    F.max(F.when(F.col("rank") == 1, F.col("day")))
                                    .alias("best_day"),
                                    F.max("kwh").alias("best_day_kwh")))
    run.write_table(records.coalesce(1), "energy_site_records",
                    TableSpec(run.data_root.uri("tables/energy_site_records"), "overwrite"))
    return JobResult(row_counts={"sites": records.count()})


@dag(dag_id="energy_daily", schedule="@daily", start_date=datetime(2024, 1, 1),
     end_date=datetime(2024, 12, 31), catchup=False, max_active_runs=1,
     tags=["checkpointed", "example"])
def energy_daily():
    readings() >> daily_usage() >> site_records()


energy_dag = energy_daily()
checkpoint_dag(energy_dag, settings)
