"""Hooks: how the provider reaches Spark through Airflow's connections."""
