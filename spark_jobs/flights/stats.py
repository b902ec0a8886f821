"""route_stats and carrier_stats: running aggregates per key (keyed state).

Per key: flights, cancellations (no departure time), sums / counts / maxima of departure
and arrival delay, distance sum, and the averages derived from them. Each epoch merges its
delta into the state restored from the previous epoch: sums and counts add, maxima take the
greatest. When the source retracted rows (a replaced raw file), the touched keys are
recomputed exactly from the source's bronze state of this epoch, since a maximum cannot be
un-merged. The state is partitioned by a hash bucket of the key, so a snapshot rewrites only
the buckets that changed. The gold output is a Delta table partitioned by the same bucket:
an epoch writes the buckets it changed and the table commit replaces exactly those.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..runtime import JobResult, JobRun, TableSpec, named_job, observed, partition_value
from .ingest_flights import BRONZE_SCHEMA

BUCKETS = 8
SOURCE = "ingest_flights"
METRICS = [("flights", T.LongType()), ("cancelled", T.LongType()),
           ("dep_delay_sum", T.DoubleType()), ("dep_delay_n", T.LongType()),
           ("dep_delay_max", T.DoubleType()), ("arr_delay_sum", T.DoubleType()),
           ("arr_delay_n", T.LongType()), ("arr_delay_max", T.DoubleType()),
           ("distance_sum", T.DoubleType())]
DERIVED = ["avg_dep_delay", "avg_arr_delay", "avg_distance"]


def gold_table(run: JobRun, output: str, partition_by: str) -> TableSpec:
    """Where a flights gold output is published: a Delta table under the data root's
    ``tables/``, whose epochs replace the partitions they recomputed."""
    return TableSpec(run.data_root.uri(f"tables/{output}"), "replace_partitions", (partition_by,))


def state_schema(keys: list[str]) -> T.StructType:
    return T.StructType([T.StructField(k, T.StringType()) for k in keys]
                        + [T.StructField(n, t) for n, t in METRICS]
                        + [T.StructField(d, T.DoubleType()) for d in DERIVED]
                        + [T.StructField("bucket", T.IntegerType())])


def aggregate(flights: DataFrame, keys: list[str]) -> DataFrame:
    """Aggregates of raw flight rows per key (no derived columns)."""
    return flights.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("flights"),
        F.sum(F.when(F.col("dep_time").isNull(), 1).otherwise(0)).cast("long").alias("cancelled"),
        F.sum("dep_delay").alias("dep_delay_sum"), F.count("dep_delay").alias("dep_delay_n"),
        F.max("dep_delay").alias("dep_delay_max"),
        F.sum("arr_delay").alias("arr_delay_sum"), F.count("arr_delay").alias("arr_delay_n"),
        F.max("arr_delay").alias("arr_delay_max"),
        F.sum(F.col("distance").cast("double")).alias("distance_sum"),
    )


def merge(prev: DataFrame, delta: DataFrame, keys: list[str]) -> DataFrame:
    """State rows plus delta aggregates for the same keys (full outer join)."""
    p, d = prev.alias("p"), delta.alias("d")
    joined = p.join(d, [F.col(f"p.{k}") == F.col(f"d.{k}") for k in keys], "full_outer")
    cols = [F.coalesce(F.col(f"p.{k}"), F.col(f"d.{k}")).alias(k) for k in keys]
    for name, _ in METRICS:
        a, b = F.col(f"p.{name}"), F.col(f"d.{name}")
        if name.endswith("_max"):
            cols.append(F.greatest(a, b).alias(name))  # greatest skips nulls
        elif name.endswith("_sum"):
            cols.append(F.when(a.isNull() & b.isNull(), None)
                        .otherwise(F.coalesce(a, F.lit(0.0)) + F.coalesce(b, F.lit(0.0)))
                        .alias(name))
        else:
            cols.append((F.coalesce(a, F.lit(0)) + F.coalesce(b, F.lit(0))).alias(name))
    return joined.select(*cols)


def finish(df: DataFrame, keys: list[str]) -> DataFrame:
    """Add the derived averages and the bucket."""
    return df.select(
        *keys, *[n for n, _ in METRICS],
        (F.col("dep_delay_sum") / F.col("dep_delay_n")).alias("avg_dep_delay"),
        (F.col("arr_delay_sum") / F.col("arr_delay_n")).alias("avg_arr_delay"),
        (F.col("distance_sum") / F.col("flights")).alias("avg_distance"),
        F.pmod(F.hash(*keys), F.lit(BUCKETS)).cast("int").alias("bucket"))


def _output_rows(run: JobRun, handle, output: str, df: DataFrame) -> int:
    """Rows of ``output`` of an upstream ``handle``: as recorded by its writer, else
    counted."""
    out = handle.outputs.get(output)
    return out.rows if out is not None and out.rows is not None else df.count()


def _bucket_rows(run: JobRun, schema: T.StructType, buckets: set[str]) -> dict[str, int]:
    """Rows per bucket of the previous state's ``buckets`` (kept by reference): from the
    previous handle's ``bucket_rows`` metric, else counted from its files."""
    if not buckets:
        return {}
    known = (run.previous.metrics.get("bucket_rows") or {}) if run.previous else {}
    if buckets <= set(known):
        return {b: int(known[b]) for b in buckets}
    refs = [f for f in run.files(run.previous, "stats/") if partition_value(f.name) in buckets]
    counted = run.read_parquet(refs, schema).groupBy("bucket").count().collect()
    return {**{b: 0 for b in buckets}, **{str(r.bucket): r["count"] for r in counted}}


def make_stats_job(keys: list[str], output: str, name: str,
                   prepare: Callable[[DataFrame], DataFrame] | None = None):
    """A job keeping the aggregates per ``keys`` and publishing them as ``output``.

    ``prepare`` transforms the source's bronze rows before they are aggregated (e.g. a key
    normalised); it applies to every row the job reads from the source, so a changed
    ``prepare`` takes effect from the epoch that first runs it (a backfill replays it)."""
    schema = state_schema(keys)
    prep = prepare or (lambda df: df)

    def job(run: JobRun) -> JobResult:
        src = run.upstream[SOURCE]
        added = prep(run.read_parquet(run.files(src, "", outputs="delta_added"),
                                      BRONZE_SCHEMA))
        retracted = prep(run.read_parquet(run.files(src, "", outputs="delta_retracted"),
                                          BRONZE_SCHEMA))
        prev = run.read_parquet(run.files(run.previous, "stats/"), schema)
        # The source counted its outputs when it wrote them: no count job here.
        n_added, n_retracted = (_output_rows(run, src, o, df) for o, df in
                                (("delta_added", added), ("delta_retracted", retracted)))
        touched = added.select(*keys).unionByName(retracted.select(*keys)).distinct()
        prev_touched = prev.join(touched, keys, "left_semi")
        if n_retracted:
            bronze = prep(run.read_parquet(run.files(src, "bronze/"), BRONZE_SCHEMA))
            fresh = aggregate(bronze.join(touched, keys, "left_semi"), keys)
        else:
            fresh = merge(prev_touched.select(*keys, *[n for n, _ in METRICS]),
                          aggregate(added, keys), keys)
        fresh_rows = Observation()
        finished = finish(fresh, keys)
        fresh = finished.observe(fresh_rows, F.count(F.lit(1)).alias("n"))
        # The buckets of every touched key, also of a key whose rows were all retracted.
        buckets = set()
        if n_added or n_retracted:
            buckets = {str(r.b) for r in touched.select(
                F.pmod(F.hash(*keys), F.lit(BUCKETS)).alias("b")).distinct().collect()}
        kept = run.partitions(run.previous, "stats") - buckets
        run.carry_partitions("stats", kept)
        table = gold_table(run, output, "bucket")
        rows = _bucket_rows(run, schema, kept)
        if buckets:
            rest = prev.where(F.col("bucket").isin([int(b) for b in buckets])) \
                       .join(touched, keys, "left_anti")
            changed = rest.unionByName(fresh).repartition("bucket").cache()
            per_bucket = Observation()
            run.write_state(changed.observe(  # computes and caches it, counting as it goes
                per_bucket, *[F.count_if(F.col("bucket") == int(b)).alias(b)
                              for b in sorted(buckets)]), "stats", "bucket")
            tally = observed(per_bucket, lambda: {b: 0 for b in buckets} | {
                str(r.bucket): r["count"] for r in changed.groupBy("bucket").count().collect()})
            rows.update({b: int(n) for b, n in tally.items()})
            run.write_table(changed, output, table, rows=sum(rows.values()),
                            replaced=buckets)
        else:
            run.keep_table(output, table, rows=sum(rows.values()))
        return JobResult(row_counts={"keys": sum(rows.values()),
                                     "keys_touched": int(observed(fresh_rows, lambda: {
                                             "n": finished.count()})["n"]) if buckets else 0,
                                     "rows_added": n_added, "rows_retracted": n_retracted},
                         metrics={"buckets_rewritten": sorted(buckets),
                                  "bucket_rows": dict(sorted(rows.items()))})

    return named_job(job, name, __name__)


route_stats = make_stats_job(["origin", "dest"], "gold_route_stats", "route_stats")
carrier_stats = make_stats_job(["carrier"], "gold_carrier_stats", "carrier_stats")
