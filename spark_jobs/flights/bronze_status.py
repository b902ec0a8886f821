"""bronze_flight_status: a Delta table maintained by plain Spark, outside any checkpoint.

What a Spark shop's bronze layer looks like: a writer of its own (here the demo, as an
ingestion job of another team would) MERGEs each day's flights into the table by their
natural key, then DELETEs the cancelled ones (no arrival delay). The table has deletion
vectors on, as Databricks sets by default, so the DELETE marks rows in place and rewrites
no file. The checkpointed DAG ``carrier_delays`` continues it exactly once as a table input.

    spark = spark_session("bronze", remote="sc://127.0.0.1:15002")
    update(spark, "file:///data/tables/bronze_flight_status",
           "file:///data/raw/flights/2013-01-01.csv")
"""

from __future__ import annotations

from typing import Any

from spark_jobs.runtime.session import spark_uri

#: the natural key of a flight
KEY = ("year", "month", "day", "carrier", "flight", "origin")
COLUMNS = ("year int, month int, day int, carrier string, flight int, origin string, "
           "dest string, dep_time double, dep_delay double, arr_delay double")
#: the landed files' columns, all read as text (a malformed value is dropped, not fatal)
RAW = ("year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
       "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum", "origin", "dest",
       "air_time", "distance", "hour", "minute", "time_hour")


def _table(location: str) -> str:
    """The table as Spark SQL names a path (a backtick would end the name: refused)."""
    if "`" in location:
        raise ValueError(f"a table location may not hold a backtick: {location!r}")
    return f"delta.`{spark_uri(location)}`"


def create(spark: Any, location: str) -> None:
    """The table, empty, with deletion vectors on (once)."""
    spark.sql(f"CREATE TABLE IF NOT EXISTS {_table(location)} ({COLUMNS}) "
              "USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")


def update(spark: Any, location: str, flights_csv: str) -> int:
    """MERGE one landed day of flights into the table (a flight seen again is updated), then
    DELETE the cancelled flights; the table's version afterwards (two commits per day)."""
    from pyspark.sql import functions as F

    create(spark, location)
    raw = spark.read.csv(spark_uri(flights_csv), header=True,
                         schema=", ".join(f"{c} string" for c in RAW))
    typed = raw.select(*[F.expr(f"try_cast({name} AS {kind})").alias(name)
                         for name, kind in (c.split() for c in COLUMNS.split(", "))])
    rows = typed.where(" AND ".join(f"{k} IS NOT NULL" for k in KEY)).dropDuplicates(list(KEY))
    rows.createOrReplaceTempView("bronze_flight_status_day")
    on = " AND ".join(f"t.{k} = s.{k}" for k in KEY)
    table = _table(location)
    spark.sql(f"MERGE INTO {table} t USING bronze_flight_status_day s ON {on} "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.sql(f"DELETE FROM {table} WHERE arr_delay IS NULL")  # noqa: S608 - no user text
    return int(spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()["version"])
