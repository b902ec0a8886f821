"""Jobs for the Spark Connect tests: one that needs the JVM, which Connect does not have,
and a deliberately slow one for resuming a killed attempt's operation."""

from __future__ import annotations

import os

from spark_jobs.runtime import JobResult, JobRun


def uses_spark_context(run: JobRun) -> JobResult:
    rdd = run.spark.sparkContext.parallelize(range(3))  # no sparkContext under Connect
    return JobResult(row_counts={"rows": rdd.count()})


#: where slow_squares' rows leave a marker each time Spark computes them
MARKS_ENV = "CKPT_TEST_MARKS"
#: how many rows (seconds of UDF time) slow_squares computes; the benchmark asks for more
ROWS_ENV = "CKPT_TEST_SLOW_ROWS"
SLOW_ROWS = 10


def slow_squares(run: JobRun) -> JobResult:
    """A deliberately slow write (one second a row, in a Python UDF on the server) whose
    rows each leave a marker file: how many markers there are says how many times Spark ran
    the action. Its row count and sum come from observations of that same write; its
    output ``squares`` (published when the epoch completes) is the written state."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    marks = os.environ[MARKS_ENV]
    rows = int(os.environ.get(ROWS_ENV, SLOW_ROWS))

    @F.udf("long")
    def slow_square(x: int) -> int:
        import time as _time
        import uuid as _uuid

        _time.sleep(1.0)
        open(os.path.join(marks, f"{x}-{_uuid.uuid4().hex}"), "w").close()
        return x * x

    df = run.spark.range(0, rows, 1, max(1, rows // 2)).select(
        F.col("id"), slow_square("id").alias("square"))
    sums = Observation()
    state = run.write_state(df.observe(sums, F.sum("square").alias("total"),
                                       F.count(F.lit(1)).alias("rows")), "squares")
    rows = int(sums.get["rows"])
    # The output is read back from the state files, not computed again: a resumed write
    # leaves one marker a row, and the epoch publishes what that one write produced.
    run.write_output(run.read_parquet(state, "id long, square long"), "squares", rows=rows)
    return JobResult(row_counts={"rows": rows, "total": int(sums.get["total"])})


def reads_a_missing_file(run: JobRun) -> JobResult:
    """Reads a file its data root does not have: Spark's error names the file's full path."""
    from spark_jobs.runtime import spark_uri

    rows = run.spark.read.parquet(spark_uri(run.data_root.uri("raw/missing.parquet"))).count()
    return JobResult(row_counts={"rows": rows})


def returns_a_table_version_metric(run: JobRun) -> JobResult:
    """Puts a TableVersion (not JSON) in its metrics: the job's own mistake."""
    from checkpointing.protocol.table_inputs import TableVersion

    rows = run.spark.range(3).count()
    return JobResult(row_counts={"rows": rows}, metrics={"source": {"end": TableVersion(4)}})
