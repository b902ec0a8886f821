"""A source job, parametrised by a :class:`SourceSpec` (flights, weather).

Offsets are the raw files consumed, with their content identity (etag or md5), kept in the
state, not the logical date: a late file for a past day is picked up, and a replaced file is
detected, its old rows retracted and its new rows ingested, however long ago it was first
consumed. They list a window of recent files and an index of every file consumed, read by
month (the runtime's :meth:`~spark_jobs.runtime.JobRun.new_input`). Rows
are parsed with an explicit schema; malformed ones go to the ``quarantine`` output with a
reason and are counted; an unreadable file is quarantined whole. Rows whose natural key the
state has already seen are dropped as duplicates.

State (``bronze/part=<date>/``): every accepted row, partitioned by date, so a snapshot
rewrites only the dates that changed. Outputs for downstream tasks of the same epoch:
``delta_added`` and ``delta_retracted``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..runtime import JobResult, JobRun, named_job, observed, partition_value, spark_uri
from .sources import quarantine_schema, split_unreadable


@dataclass(frozen=True)
class SourceSpec:
    name: str
    prefix: str  # raw zone prefix, e.g. raw/flights/
    columns: list[str]
    ints: frozenset[str]
    doubles: frozenset[str]
    required: list[str]
    natural_key: list[str]
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def key_holds_date(self) -> bool:
        """Whether the natural key determines the row's date (then duplicates of a row
        can only be in its own date's partition)."""
        return {"year", "month", "day"} <= set(self.natural_key)

    @property
    def bronze_schema(self) -> T.StructType:
        return T.StructType(
            [T.StructField(c, T.IntegerType() if c in self.ints else
                           T.DoubleType() if c in self.doubles else T.StringType())
             for c in self.columns]
            + [T.StructField("source_file", T.StringType()),
               T.StructField("row_date", T.StringType())])


def parse(raw: DataFrame, spec: SourceSpec) -> tuple[DataFrame, DataFrame]:
    """(typed good rows, quarantined rows with a reason) from all-string raw rows."""
    num = {c: F.expr(f"try_cast(`{c}` AS double)") for c in spec.ints | spec.doubles}
    reasons = [F.when(F.col("_corrupt").isNotNull(), F.lit("unparseable_row"))]
    for c in spec.required:
        reasons.append(F.when(F.col(c).isNull() | (F.trim(F.col(c)) == ""),
                              F.lit(f"missing_key:{c}")))
    for c in sorted(spec.ints | spec.doubles):
        present = F.col(c).isNotNull() & (F.trim(F.col(c)) != "")
        reasons.append(F.when(present & num[c].isNull(), F.lit(f"wrong_type:{c}")))
        if c in spec.ints:
            reasons.append(F.when(num[c].isNotNull() & (num[c] != F.floor(num[c])),
                                  F.lit(f"wrong_type:{c}")))
    for c, (lo, hi) in spec.ranges.items():
        reasons.append(F.when(num[c].isNotNull() & ((num[c] < lo) | (num[c] > hi)),
                              F.lit(f"impossible_value:{c}")))
    tagged = raw.withColumn("reason", F.coalesce(*reasons))
    good = tagged.where(F.col("reason").isNull()).select(
        *[num[c].cast("int").alias(c) if c in spec.ints else
          num[c].alias(c) if c in spec.doubles else
          F.nullif(F.trim(F.col(c)), F.lit("")).alias(c) for c in spec.columns],
        "source_file")
    good = good.withColumn("row_date", F.format_string("%04d-%02d-%02d", "year", "month", "day"))
    bad = tagged.where(F.col("reason").isNotNull()).select(
        F.to_json(F.struct(*[F.col(c) for c in spec.columns])).alias("raw"),
        "reason", "source_file")
    return good, bad


def read_raw(run: JobRun, keys: list[str], spec: SourceSpec) -> DataFrame:
    """All-string rows of the given raw CSV files, with their source key."""
    schema = T.StructType([T.StructField(c, T.StringType()) for c in spec.columns]
                          + [T.StructField("_corrupt", T.StringType())])
    if not keys:
        return run.spark.createDataFrame([], schema).withColumn(
            "source_file", F.lit(None).cast("string"))
    df = (run.spark.read.schema(schema)
          .option("header", True).option("mode", "PERMISSIVE")
          .option("columnNameOfCorruptRecord", "_corrupt").option("enforceSchema", False)
          .csv([spark_uri(run.data_root.uri(k)) for k in keys]))
    # The raw key from the file's name: the same on file://, s3a:// and any cluster.
    name = F.element_at(F.split(F.input_file_name(), "/"), -1)
    return df.withColumn("source_file", F.concat(F.lit(spec.prefix), name))


def make_source_job(spec: SourceSpec, name: str, module: str):
    schema = spec.bronze_schema

    def job(run: JobRun) -> JobResult:
        found = run.new_input(spec.prefix)
        new_keys, replaced = found.new, found.replaced
        # A replaced file (a correction, whatever its age: the task's index of seen files
        # knows it) has its old rows retracted. A late file's rows are retracted too: none
        # are in the state unless it was consumed before this task kept an index.
        superseded = replaced + found.late
        readable, unreadable = split_unreadable(run.data_root, new_keys, spec.columns)

        good, quarantine = parse(read_raw(run, readable, spec), spec)
        good = good.dropDuplicates(spec.natural_key).cache()  # a file repeating a row
        per_day = {r.row_date: r["count"] for r in good.groupBy("row_date").count().collect()}
        n_good = sum(per_day.values())
        # The new rows can only repeat state rows of their own days when the natural key
        # holds the date: read those partitions, not the whole history. A replaced file's
        # rows may be anywhere: then the whole state is read (a rare, correcting epoch).
        prev_refs = run.files(run.previous, "bronze/")
        if not replaced and spec.key_holds_date:
            prev_refs = [f for f in prev_refs if partition_value(f.name) in per_day]
        bronze_prev = run.read_parquet(prev_refs, schema)
        in_replaced = F.col("source_file").isin(superseded)
        kept_prev = bronze_prev.where(~in_replaced) if superseded else bronze_prev
        added = good.join(kept_prev.select(*spec.natural_key), spec.natural_key, "left_anti")
        added = added.select(*schema.fieldNames()).cache()
        # Staged first: its write computes (and caches) the new rows, counting them and
        # observing their dates, which the state's rewrite needs; no Spark job of its own.
        added_days = Observation()
        n_added = run.write_output(
            added.observe(added_days, F.collect_set("row_date").alias("days")), "delta_added")
        touched = set(observed(added_days, lambda: {"days": added.select(
            F.collect_set("row_date")).first()[0]})["days"] or ())
        n_retracted = 0
        if superseded:
            retracted = bronze_prev.where(in_replaced).cache()
            retracted_per_day = {r.row_date: r["count"]
                                 for r in retracted.groupBy("row_date").count().collect()}
            n_retracted = sum(retracted_per_day.values())
            touched |= set(retracted_per_day)
        # Rows in the state, kept as a running count so that readers (validate) need not
        # scan the whole history; counted once for handles written before it existed.
        prev_rows = run.previous.row_counts.get("state_rows") if run.previous else 0
        if prev_rows is None:
            prev_rows = run.read_parquet(run.files(run.previous, "bronze/"), schema).count()
        state_rows = prev_rows - n_retracted + n_added

        run.carry_partitions("bronze", run.partitions(run.previous, "bronze") - touched)
        if touched:
            rewrite = kept_prev.where(F.col("row_date").isin(sorted(touched))).unionByName(added)
            run.write_state(rewrite.repartition("row_date"), "bronze", "row_date")

        unreadable_df = run.spark.createDataFrame(
            [(None, f"unreadable_file:{why}", k) for k, why in unreadable], quarantine_schema())
        quarantine = quarantine.unionByName(unreadable_df)
        if n_retracted:
            run.write_output(retracted, "delta_retracted", rows=n_retracted)
        else:
            run.stage_empty("delta_retracted")  # no Spark job for nothing
        # counted by its write: one unreadable file is one row
        n_bad_rows = run.write_output(quarantine, "quarantine") - len(unreadable)
        return JobResult(
            offsets=found.offsets,
            row_counts={"rows_read": n_good + n_bad_rows, "rows_added": n_added,
                        "rows_quarantined": n_bad_rows, "duplicates_dropped": n_good - n_added,
                        "rows_retracted": n_retracted, "state_rows": state_rows,
                        "files_new": len(new_keys),
                        "files_replaced": len(replaced), "files_late": len(found.late),
                        "files_unreadable": len(unreadable)},
            metrics={"partitions_rewritten": sorted(touched),
                     "unreadable_files": [k for k, _ in unreadable]},
        )

    return named_job(job, name, module)
