"""Jobs for the failure-path tests under `airflow standalone`: a running count whose
attempt can be held at a gate (a file under the data root) while the test aborts its epoch,
marks it failed or lets it go, and a job that declines an epoch when told to."""

from __future__ import annotations

import time

from pyspark.sql import types as T

from spark_jobs.runtime import DeclineEpoch, JobResult, JobRun

SCHEMA = T.StructType([T.StructField("epoch", T.LongType()), T.StructField("n", T.LongType())])
GATE_SECONDS = 240


def _epoch_rows(run: JobRun):  # noqa: ANN202 - a Spark DataFrame
    """This epoch's ten rows of SCHEMA."""
    return run.spark.range(10).selectExpr(f"CAST({run.epoch_id} AS BIGINT) AS epoch",
                                          "id AS n")


def _flag(run: JobRun, name: str) -> bool:
    return run.data is not None and run.data.exists(f"control/{name}")


def gated_count(run: JobRun) -> JobResult:
    """Adds 10 rows per epoch to its state, then, while the test holds the gate
    (``control/hold``), waits until its epoch's gate opens (``control/open-<epoch>``).
    With ``control/hold-spark``, it is :func:`spark_gated_count` instead."""
    if _flag(run, "decline"):
        raise DeclineEpoch(f"control file says epoch {run.epoch_id} has bad data")
    if _flag(run, "hold-spark"):
        return spark_gated_count(run)
    old = run.read_parquet(run.files(run.previous, "counts/"), SCHEMA)
    state = old.unionByName(_epoch_rows(run))
    run.write_state(state, "counts")
    run.write_output(state.groupBy().count().withColumnRenamed("count", "rows"), "counts")
    if _flag(run, "hold") and not _flag(run, f"open-{run.epoch_id}"):
        run.data.write(f"control/held-{run.epoch_id}", b"")  # the test waits for this
        deadline = time.time() + GATE_SECONDS
        while not _flag(run, f"open-{run.epoch_id}") and time.time() < deadline:
            time.sleep(0.5)
    return JobResult(row_counts={"counts": state.count()})


def outlasting_count(run: JobRun) -> JobResult:
    """Writes its state, then outlasts its DAG run's ``dagrun_timeout`` (at most
    GATE_SECONDS): the scheduler fails the run, with this task still running."""
    run.write_state(_epoch_rows(run), "counts")
    time.sleep(GATE_SECONDS)
    return JobResult(row_counts={"counts": 10})


def total(run: JobRun) -> JobResult:
    """Reads its upstream's staged output of this epoch (aligned barrier)."""
    refs = run.files(run.upstream["count"], "", outputs="counts")
    rows = run.read_parquet(refs, T.StructType([T.StructField("rows", T.LongType())]))
    run.write_output(rows, "total")
    # What a job may well print: full paths, which the task log must not show.
    print("total read", rows.inputFiles())
    return JobResult(row_counts={"total": rows.count()})


SPARK_GATE_SECONDS = 180


def spark_gated_count(run: JobRun) -> JobResult:
    """Like :func:`gated_count`, but held inside a Spark action (a Python UDF, on the Spark
    Connect server) while ``control/hold-spark`` exists, for at most SPARK_GATE_SECONDS; it
    touches ``control/spark-alive-<epoch>`` every half second, so the test sees whether
    Spark still runs the attempt's work after Airflow stopped the task."""
    control = run.data.root / "control"  # a local data root: the server's disk too
    epoch = run.epoch_id

    def hold(batches):  # noqa: ANN001, ANN202 - runs in the server's Python worker
        import time

        deadline = time.time() + SPARK_GATE_SECONDS
        while (control / "hold-spark").exists() and time.time() < deadline:
            (control / f"spark-alive-{epoch}").touch()  # sets its mtime to now
            time.sleep(0.5)
        yield from batches

    state = _epoch_rows(run)
    held = state.repartition(1).mapInPandas(hold, state.schema)
    run.write_state(held, "counts")
    run.write_output(held.groupBy().count().withColumnRenamed("count", "rows"), "counts")
    return JobResult(row_counts={"counts": 10})


def count_landed(run: JobRun) -> JobResult:
    """The rows of the readings files landed for this epoch (``raw/readings/``), read by
    Spark and published as output ``landed`` (one row: the count)."""
    from spark_jobs.runtime import spark_uri

    found = run.new_input("raw/readings/")
    files = [spark_uri(run.data.uri(k)) for k in found.new]
    n = run.spark.read.option("header", True).csv(files).count() if files else 0
    run.write_output(run.spark.createDataFrame([(n,)], "rows LONG"), "landed", rows=1)
    return JobResult(offsets=found.offsets, row_counts={"landed_rows": n})


def landed_table(run: JobRun) -> JobResult:
    """Appends the readings files landed for this epoch (``raw/readings/``) to the Delta
    table ``tables/landed`` under the data root (table output ``landed``)."""
    from pyspark.sql import functions as F

    from spark_jobs.runtime import TableSpec, spark_uri

    found = run.new_input("raw/readings/")
    files = [spark_uri(run.data.uri(k)) for k in found.new]
    if files:
        df = run.spark.read.option("header", True).csv(files) \
            .select("meter", F.col("kwh").cast("double").alias("kwh"))
    else:
        df = run.spark.createDataFrame([], "meter STRING, kwh DOUBLE")
    n = run.write_table(df, "landed", TableSpec(run.data.uri("tables/landed"), "append"))
    return JobResult(offsets=found.offsets, row_counts={"landed": n})


def landed_summary(run: JobRun) -> JobResult:
    """Counts the rows table input ``landed`` gained since the version its state consumed
    (output ``summary``: one row)."""
    changes = run.table_changes("landed")
    n = changes.added.count() - changes.removed.count()
    run.write_output(run.spark.createDataFrame([(n,)], "rows LONG"), "summary", rows=1)
    return JobResult(row_counts={"summary_rows": n})
