"""Registers the DAG-checkpoints plugin with Airflow (REST API, UI and listeners attach
here)."""

from airflow.plugins_manager import AirflowPlugin


class DagCheckpointsPlugin(AirflowPlugin):
    name = "dag_checkpoints"
