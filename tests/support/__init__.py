"""What the tests share: servers they start (MinIO, PostgreSQL, Airflow, Spark), sinks that
receive what the project emits, independent oracles, jobs and drivers run as processes."""
