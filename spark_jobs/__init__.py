"""Spark side of DAG-level checkpoints: the job runtime every checkpointed job follows
(:mod:`spark_jobs.runtime`, which belongs to no pipeline) and the pipelines built on it
(:mod:`spark_jobs.flights`, the reference pipeline)."""
