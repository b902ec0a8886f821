"""A user's fixed job, for the backfill-with-a-changed-job test: from data day 3 the raw
files carry some carrier codes in lower case, which the deployed carrier_stats counts as
carriers of their own. The fix normalises the code before aggregating; the test deploys it
by editing the DAG file, then backfills from a savepoint taken before the bug showed."""

from __future__ import annotations

from pyspark.sql import functions as F

from spark_jobs.flights.stats import make_stats_job

carrier_stats = make_stats_job(
    ["carrier"], "gold_carrier_stats", "carrier_stats",
    prepare=lambda df: df.withColumn("carrier", F.upper(F.col("carrier"))))
