"""Jobs for the Spark Connect tests: one that needs the JVM, which Connect does not have."""

from __future__ import annotations

from spark_jobs.runtime import JobResult, JobRun


def uses_spark_context(run: JobRun) -> JobResult:
    rdd = run.spark.sparkContext.parallelize(range(3))  # no sparkContext under Connect
    return JobResult(row_counts={"rows": rdd.count()})
