"""carrier_delays: arrival delays per carrier, kept incrementally from a bronze Delta table
that plain Spark maintains (``bronze_flight_status``: MERGE, then DELETE with deletion
vectors). Each epoch reads the rows added and removed since the version its previous epoch
consumed (``run.table_changes``): a row a DELETE marked in a deletion vector comes back as
a retraction, a row a MERGE updated as a retraction of its old values and an addition of
its new ones. The state (flights, late arrivals and minutes of delay per carrier) always
equals the same figures over the table's content at the version the barrier pinned; it is
published as the Delta table ``gold_carrier_delays``.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from spark_jobs.runtime import JobResult, JobRun, TableSpec

#: an arrival more than this many minutes late is late (the US DOT's rule)
LATE_MINUTES = 15
STATE_SCHEMA = "carrier string, flights long, late long, delay_minutes double"
OUTPUT = "gold_carrier_delays"


def carrier_delays(run: JobRun) -> JobResult:
    changes = run.table_changes("status")
    before = run.read_parquet(run.files(run.previous, "carriers/"), STATE_SCHEMA)
    change = changes.signed().groupBy("carrier").agg(
        F.sum("_sign").cast("long").alias("flights"),
        F.sum(F.when(F.col("arr_delay") > LATE_MINUTES, F.col("_sign")).otherwise(0))
        .cast("long").alias("late"),
        F.sum(F.col("arr_delay") * F.col("_sign")).cast("double").alias("delay_minutes"))
    state = (before.unionByName(change).groupBy("carrier")
             .agg(F.sum("flights").alias("flights"), F.sum("late").alias("late"),
                  F.sum("delay_minutes").alias("delay_minutes"))
             .where(F.col("flights") != 0))
    run.write_state(state, "carriers")
    state = run.read_parquet(run.writer.files("carriers/"), STATE_SCHEMA)
    table = state.withColumn("mean_delay", F.col("delay_minutes") / F.col("flights"))
    rows = run.write_table(table, OUTPUT, TableSpec(run.data_root.uri(f"tables/{OUTPUT}"),
                                                    "overwrite"))
    return JobResult(row_counts={OUTPUT: rows}, metrics={"read": changes.metrics()})
