"""The Airflow plugin: the REST API, the Epochs page (an external view embedded in each
DAG's page), the DAG-run listener that cancels an ended run's pending epoch and the
scheduler's staleness watcher.
Correctness lives in the operators; nothing here is needed for a run to be checkpointed."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from . import airflow_fixes, run_listener, staleness_watch

# The api-server loads this plugin: Airflow defects that break clearing a checkpointed
# DAG's runs (and backfills over them) are worked around here, while they last.
airflow_fixes.apply()

URL_PREFIX = "/ckpt"


class _ApiApps:
    """``fastapi_apps``, read only by the API server (and ``airflow plugins``): the REST
    API's module imports FastAPI and Airflow's API security, which every other process
    loading plugins (the scheduler, the dag-processor, the triggerer, ``airflow dags test``)
    would pay for nothing (loading the plugins as a scheduler does: 2.0 CPU-s against
    3.3)."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        from .api import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "DAG checkpoints"}]


class DagCheckpointsPlugin(AirflowPlugin):
    name = "dag_checkpoints"
    # A run that ended with its epoch pending (marked failed by an operator, its
    # dagrun_timeout) has the epoch cancelled at once, not at its timeout.
    # ... and each scheduler watches every checkpointed DAG's last-completed age, runs or no
    # runs, so that silence pages (staleness_watch).
    listeners = [run_listener, staleness_watch.StalenessWatch()]
    fastapi_apps = _ApiApps()
    external_views = [{
        "name": "Epochs",
        "href": f"{URL_PREFIX}/ui/{{DAG_ID}}",
        "destination": "dag",
        "url_route": "epochs",
    }]
