"""The Airflow plugin: the REST API and the Epochs page (an external view embedded in each
DAG's page). Correctness lives in the operators; nothing here is needed for a run to be
checkpointed."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .api import app

URL_PREFIX = "/ckpt"


class DagCheckpointsPlugin(AirflowPlugin):
    name = "dag_checkpoints"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "DAG checkpoints"}]
    external_views = [{
        "name": "Epochs",
        "href": f"{URL_PREFIX}/ui/{{DAG_ID}}",
        "destination": "dag",
        "url_route": "epochs",
    }]
