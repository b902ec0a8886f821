"""Incremental PySpark jobs of the flights pipeline, each runnable by spark-submit and
importable in local mode. They reach checkpoint storage only through ``checkpointing``."""
