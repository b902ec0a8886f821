"""Real components started for a measurement or a test, and the independent computations
results are compared with: an Airflow standalone, PostgreSQL databases, MinIO, the StatsD,
webhook and SMTP receivers, the pandas and DuckDB oracles. The benchmarks use them and so
does the test suite; nothing here imports the tests (the suite imports the benchmarks, not
the other way round)."""
