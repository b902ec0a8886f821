"""enrich: fan-in of the flights and weather sources and the dimension tables.

Aligned barrier: it reads both sources' handles of *its own* epoch (the runtime hands it
nothing else), never one source's epoch N with the other's N-1. A date is recomputed when
either source changed it in this epoch (so a weather file that arrives late re-enriches the
flights of its day); other dates are carried from the previous snapshot. The state is kept
as ``enriched/part=<date>/``; the gold output ``gold_flights_enriched`` is a Delta table
partitioned by ``row_date`` whose epoch commit replaces the recomputed dates.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..runtime import JobResult, JobRun
from .ingest_flights import BRONZE_SCHEMA as FLIGHTS_SCHEMA
from .ingest_weather import BRONZE_SCHEMA as WEATHER_SCHEMA
from .stats import gold_table

FLIGHTS, WEATHER = "ingest_flights", "ingest_weather"
WEATHER_COLS = ["temp", "humid", "wind_speed", "precip", "visib"]


def _touched_dates(run: JobRun, task: str, schema: T.StructType) -> set[str]:
    """The dates the source added or retracted rows of in this epoch: the partitions it
    rewrote (its handle's metrics), else read from its delta outputs."""
    h = run.upstream[task]
    if "partitions_rewritten" in h.metrics:
        return set(h.metrics["partitions_rewritten"])
    dates: set[str] = set()
    for out in ("delta_added", "delta_retracted"):
        df = run.read_parquet(run.files(h, "", outputs=out), schema)
        dates |= {r.row_date for r in df.select("row_date").distinct().collect()}
    return dates


def _bronze_for(run: JobRun, task: str, schema: T.StructType, dates: set[str]) -> DataFrame:
    refs = [f for f in run.files(run.upstream[task], "bronze/")
            if any(f"/part={d}/" in f.name for d in dates)]
    return run.read_parquet(refs, schema)


def _dims(run: JobRun) -> tuple[DataFrame, DataFrame]:
    def csv(name: str) -> DataFrame:
        return run.spark.read.option("header", True).csv(
            run.data_uri(f"raw/dims/{name}.csv"))

    return (csv("airlines").select(F.col("carrier"), F.col("name").alias("airline")),
            csv("airports").select(F.col("faa"), F.col("name").alias("airport")))


def enrich(run: JobRun) -> JobResult:
    dates = _touched_dates(run, FLIGHTS, FLIGHTS_SCHEMA) | \
        _touched_dates(run, WEATHER, WEATHER_SCHEMA)
    run.carry_partitions("enriched", run.partitions(run.previous, "enriched") - dates)
    n = 0
    if dates:
        flights = _bronze_for(run, FLIGHTS, FLIGHTS_SCHEMA, dates)
        weather = _bronze_for(run, WEATHER, WEATHER_SCHEMA, dates) \
            .select("origin", "time_hour", *WEATHER_COLS)
        airlines, airports = _dims(run)
        enriched = (flights.join(weather, ["origin", "time_hour"], "left")
                    .join(F.broadcast(airlines), "carrier", "left")
                    .join(F.broadcast(airports.withColumnRenamed("faa", "dest")
                                      .withColumnRenamed("airport", "dest_airport")),
                          "dest", "left")
                    .drop("source_file")).repartition("row_date").cache()
        run.write_state(enriched, "enriched", "row_date")  # computes and caches it
        # A recomputed date with no flight left is replaced by nothing.
        n = run.write_table(enriched, "gold_flights_enriched",  # counts as it writes
                            gold_table(run, "gold_flights_enriched", "row_date"),
                            replaced=dates)
    else:
        run.keep_table("gold_flights_enriched",
                       gold_table(run, "gold_flights_enriched", "row_date"))
    return JobResult(row_counts={"rows_recomputed": n},
                     metrics={"dates_recomputed": sorted(dates)})
