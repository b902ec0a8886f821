"""ingest_flights: the flights source.

Offsets are the raw files consumed, with their content identity (etag or md5), kept in the
state, not the logical date: a late file for a past day is picked up, and a replaced file is
detected, its old rows retracted and its new rows ingested. Rows are parsed with an explicit
schema; malformed ones go to the quarantine output with a reason and are counted; an
unreadable file is quarantined whole. Rows whose natural key the state has already seen are
dropped as duplicates.

State (``bronze/flight_date=YYYY-MM-DD/``): every accepted flight, partitioned by date, so a
snapshot rewrites only the dates that changed. Epoch outputs for downstream tasks:
``delta_added`` and ``delta_retracted`` (rows of this epoch only).
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .harness import JobResult, JobRun, spark_uri
from .landing import FLIGHT_COLUMNS
from .sources import changed_files, quarantine_schema, split_unreadable

NATURAL_KEY = ["year", "month", "day", "carrier", "flight", "origin"]
INT_COLS = {"year", "month", "day", "sched_dep_time", "sched_arr_time", "flight", "distance",
            "hour", "minute"}
DOUBLE_COLS = {"dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"}
REQUIRED = ["year", "month", "day", "carrier", "flight", "origin", "dest", "sched_dep_time",
            "distance"]

BRONZE_SCHEMA = T.StructType(
    [T.StructField(c, T.IntegerType() if c in INT_COLS else
                   T.DoubleType() if c in DOUBLE_COLS else T.StringType()) for c in FLIGHT_COLUMNS]
    + [T.StructField("source_file", T.StringType()), T.StructField("flight_date", T.StringType())])


def parse_flights(raw: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(typed good rows, quarantined rows with a reason) from all-string raw rows."""
    reasons = []
    for c in REQUIRED:
        reasons.append(F.when(F.col(c).isNull() | (F.trim(F.col(c)) == ""),
                              F.lit(f"missing_key:{c}")))
    for c in sorted(INT_COLS | DOUBLE_COLS):
        typ = "int" if c in INT_COLS else "double"
        reasons.append(F.when(F.col(c).isNotNull() & (F.trim(F.col(c)) != "")
                              & F.expr(f"try_cast({c} AS double)").isNull(),
                              F.lit(f"wrong_type:{c}")))
        if typ == "int":
            reasons.append(F.when(F.expr(f"try_cast({c} AS double)").isNotNull()
                                  & (F.expr(f"try_cast({c} AS double)")
                                     != F.floor(F.expr(f"try_cast({c} AS double)"))),
                                  F.lit(f"wrong_type:{c}")))
    num = {c: F.expr(f"try_cast({c} AS double)") for c in INT_COLS | DOUBLE_COLS}
    for c, lo, hi in [("month", 1, 12), ("day", 1, 31), ("hour", 0, 23), ("minute", 0, 59),
                      ("distance", 1, 6000), ("dep_delay", -1440, 1440),
                      ("arr_delay", -1440, 1440), ("year", 2013, 2013)]:
        reasons.append(F.when(num[c].isNotNull() & ((num[c] < lo) | (num[c] > hi)),
                              F.lit(f"impossible_value:{c}")))
    reasons.append(F.when(F.col("_corrupt").isNotNull(), F.lit("unparseable_row")))
    with_reason = raw.withColumn("reason", F.coalesce(*reasons))
    bad = with_reason.where(F.col("reason").isNotNull())
    good = with_reason.where(F.col("reason").isNull())
    typed = good.select(
        *[F.expr(f"cast(try_cast({c} AS double) AS int)").alias(c) if c in INT_COLS else
          F.expr(f"try_cast({c} AS double)").alias(c) if c in DOUBLE_COLS else
          F.nullif(F.trim(F.col(c)), F.lit("")).alias(c) for c in FLIGHT_COLUMNS],
        "source_file")
    typed = typed.withColumn("flight_date", F.format_string("%04d-%02d-%02d", "year", "month",
                                                            "day"))
    quarantine = bad.select(
        F.to_json(F.struct(*[F.col(c) for c in FLIGHT_COLUMNS])).alias("raw"),
        "reason", "source_file")
    return typed, quarantine


def read_raw(run: JobRun, keys: list[str], columns: list[str]) -> DataFrame:
    """All-string rows of the given raw CSV files, with their source key."""
    schema = T.StructType([T.StructField(c, T.StringType()) for c in columns]
                          + [T.StructField("_corrupt", T.StringType())])
    if not keys:
        return run.spark.createDataFrame([], schema).withColumn("source_file", F.lit(None)
                                                                .cast("string"))
    prefix = keys[0].rsplit("/", 1)[0] + "/"
    df = (run.spark.read.schema(schema)
          .option("header", True).option("mode", "PERMISSIVE")
          .option("columnNameOfCorruptRecord", "_corrupt").option("enforceSchema", False)
          .csv([spark_uri(run.data.uri(k)) for k in keys]))
    # The raw key from the file's name: the same on file://, s3a:// and any cluster.
    name = F.element_at(F.split(F.input_file_name(), "/"), -1)
    return df.withColumn("source_file", F.concat(F.lit(prefix), name))


def ingest_flights(run: JobRun) -> JobResult:
    prev_offsets = (run.previous.offsets or {}).get("files", {}) if run.previous else {}
    current, new_keys, replaced = changed_files(run.data, "raw/flights/", prev_offsets)
    readable, unreadable = split_unreadable(run.data, new_keys, FLIGHT_COLUMNS)

    bronze_prev = run.read_parquet(run.files(run.previous, "bronze/"), BRONZE_SCHEMA)
    raw = read_raw(run, readable, FLIGHT_COLUMNS)
    good, quarantine = parse_flights(raw)
    good = good.dropDuplicates(NATURAL_KEY)  # a file repeating a row

    retracted = bronze_prev.where(F.col("source_file").isin(replaced)) if replaced else \
        bronze_prev.limit(0)
    kept_prev = bronze_prev.where(~F.col("source_file").isin(replaced)) if replaced else \
        bronze_prev
    added = good.join(kept_prev.select(*NATURAL_KEY), NATURAL_KEY, "left_anti")
    added = added.select(*BRONZE_SCHEMA.fieldNames()).cache()
    retracted = retracted.cache()
    n_good, n_added = good.count(), added.count()

    touched = {r.flight_date for r in added.select("flight_date").distinct().collect()} | \
              {r.flight_date for r in retracted.select("flight_date").distinct().collect()}
    unchanged = run.partitions(run.previous, "bronze", "flight_date") - touched
    run.carry_partitions("bronze", "flight_date", unchanged)
    if touched:
        new_parts = kept_prev.where(F.col("flight_date").isin(sorted(touched))).unionByName(added)
        run.write_state(new_parts.repartition("flight_date"), "bronze", "flight_date")

    unreadable_df = run.spark.createDataFrame(
        [(None, f"unreadable_file:{why}", k) for k, why in unreadable], quarantine_schema())
    quarantine = quarantine.unionByName(unreadable_df).cache()
    n_quarantined = quarantine.where(~F.col("reason").startswith("unreadable_file")).count()
    run.write_output(added, "delta_added", rows=n_added)
    run.write_output(retracted, "delta_retracted", rows=retracted.count())
    run.write_output(quarantine, "quarantine", rows=quarantine.count())
    return JobResult(
        offsets={"files": current},
        row_counts={"rows_read": n_good + n_quarantined, "rows_added": n_added,
                    "rows_quarantined": n_quarantined, "duplicates_dropped": n_good - n_added,
                    "rows_retracted": retracted.count(), "files_new": len(new_keys),
                    "files_replaced": len(replaced), "files_unreadable": len(unreadable)},
        metrics={"partitions_rewritten": sorted(touched),
                 "unreadable_files": [k for k, _ in unreadable]},
    )


if __name__ == "__main__":
    from .cli import main

    sys.exit(main(ingest_flights, "ingest_flights"))
