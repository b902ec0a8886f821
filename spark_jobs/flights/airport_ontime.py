"""airport_ontime: on-time performance per departure airport over a rolling window of days,
kept incrementally from flights_daily's published Delta table ``gold_flights_enriched``.

The job continues a lakehouse pipeline: its only input is another pipeline's table
(``run.table_changes``), read from the version its previous epoch consumed to the version
the epoch's barrier pinned. flights_daily replaces the day partitions it recomputes (a late
or corrected file), so a change holds the old rows of a replaced day as retractions and its
new rows as additions; the keyed state (flights, on-time arrivals and cancellations per
airport and day) subtracts the one and adds the other, and always equals the same counts
over the upstream table's content at the pinned version.
"""

from __future__ import annotations

from datetime import date, timedelta

from pyspark.sql import functions as F

from spark_jobs.runtime import JobResult, JobRun, TableSpec

#: the window the published rates cover: the newest day in the state and the days before
WINDOW_DAYS = 7
#: an arrival at most this many minutes late is on time (the US DOT's rule)
ON_TIME_MINUTES = 15
STATE_SCHEMA = "origin string, row_date string, flights long, on_time long, cancelled long"
OUTPUT = "gold_airport_ontime"


def day_counts(rows, sign: str = "_sign"):
    """Signed flights, on-time arrivals and cancellations per airport and day."""
    return rows.groupBy("origin", F.col("row_date").cast("string").alias("row_date")).agg(
        F.sum(sign).cast("long").alias("flights"),
        F.sum(F.when(F.col("arr_delay") <= ON_TIME_MINUTES, F.col(sign)).otherwise(0))
        .cast("long").alias("on_time"),
        F.sum(F.when(F.col("dep_time").isNull(), F.col(sign)).otherwise(0))
        .cast("long").alias("cancelled"))


def window_rates(state, newest: str | None):
    """Per airport, over the WINDOW_DAYS days up to ``newest``: flights, on-time share of
    the flights that arrived, cancellations."""
    if newest is None:
        return state.limit(0).select("origin", "flights", "on_time", "cancelled",
                                     F.lit(None).cast("double").alias("on_time_rate"),
                                     F.lit(None).cast("string").alias("window_end"))
    first = (date.fromisoformat(newest) - timedelta(days=WINDOW_DAYS - 1)).isoformat()
    return (state.where(F.col("row_date").between(first, newest)).groupBy("origin")
            .agg(F.sum("flights").alias("flights"), F.sum("on_time").alias("on_time"),
                 F.sum("cancelled").alias("cancelled"))
            .withColumn("on_time_rate", F.col("on_time") /
                        (F.col("flights") - F.col("cancelled")))
            .withColumn("window_end", F.lit(newest)))


def ontime(run: JobRun) -> JobResult:
    changes = run.table_changes("flights")
    before = run.read_parquet(run.files(run.previous, "days/"), STATE_SCHEMA)
    if changes.empty and run.previous is not None:
        # Nothing committed upstream since the last epoch: the state is carried as it is.
        for ref in run.files(run.previous, "days/"):
            run.writer.reference(ref)
        state = before
    else:
        change = day_counts(changes.signed().select("origin", "row_date", "arr_delay",
                                                    "dep_time", "_sign"))
        state = (before.unionByName(change).groupBy("origin", "row_date")
                 .agg(F.sum("flights").alias("flights"), F.sum("on_time").alias("on_time"),
                      F.sum("cancelled").alias("cancelled"))
                 .where(F.col("flights") != 0))
        run.write_state(state, "days")
        state = run.read_parquet(run.writer.files("days/"), STATE_SCHEMA)
    newest = state.agg(F.max("row_date")).first()[0]
    rows = run.write_table(window_rates(state, newest), OUTPUT,
                           TableSpec(run.data_root.uri(f"tables/{OUTPUT}"), "overwrite"))
    return JobResult(row_counts={OUTPUT: rows},
                     metrics={"window_end": newest, "read": changes.metrics()})
