"""Provider metadata (the ``apache_airflow_provider`` entry point): what ``airflow providers
list`` shows and where ``@task.checkpointed_spark`` comes from. The plugin (REST API, Epochs
page) registers through the ``airflow.plugins`` entry point, not here, so that it loads once."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE = "dag-checkpoints"


def get_provider_info() -> dict[str, Any]:
    try:
        current = version(PACKAGE)
    except PackageNotFoundError:  # imported from a source tree, not installed
        current = "0.0.0"
    return {
        "package-name": PACKAGE,
        "name": "DAG checkpoints",
        "description": "Flink-style checkpoints for Airflow DAGs of Spark jobs: epochs, "
                       "barriers, state handles, exactly-once publication, restore on retry, "
                       "backfill from a checkpoint, timeout alerts.",
        "versions": [current],
        "task-decorators": [{"name": "checkpointed_spark",
                             "class-name": "dag_checkpoints.decorators.checkpointed_spark_task"}],
    }
