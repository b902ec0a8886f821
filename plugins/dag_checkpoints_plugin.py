"""Registers the DAG-checkpoints plugin when ``plugins/`` is Airflow's plugins folder and the
package is not pip-installed. A pip install registers it through the ``airflow.plugins``
entry point; exporting it here too would register it twice (Airflow then shows a plugin
import error: "already registered")."""

from importlib.metadata import entry_points

if not entry_points(group="airflow.plugins", name="dag_checkpoints"):
    from dag_checkpoints.server.plugin import DagCheckpointsPlugin

    __all__ = ["DagCheckpointsPlugin"]
