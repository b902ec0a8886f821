"""Registers the DAG-checkpoints plugin when ``plugins/`` is Airflow's plugins folder (a pip
install registers it through the ``airflow.plugins`` entry point instead)."""

from dag_checkpoints.plugin import DagCheckpointsPlugin

__all__ = ["DagCheckpointsPlugin"]
