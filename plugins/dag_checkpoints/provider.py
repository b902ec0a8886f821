"""Provider metadata (the ``apache_airflow_provider`` entry point): what ``airflow providers
list`` shows and where ``@task.checkpointed_spark`` comes from. The plugin (REST API, Epochs
page) registers through the ``airflow.plugins`` entry point, not here, so that it loads once."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE = "dag-checkpoints"
INTEGRATION = "DAG checkpoints"


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
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "operators": [{"integration-name": INTEGRATION, "python-modules": [
            "dag_checkpoints.operators.epoch", "dag_checkpoints.operators.spark",
            "dag_checkpoints.operators.view", "dag_checkpoints.operators.epoch_timeout"]}],
        "triggers": [{"integration-name": INTEGRATION,
                      "python-modules": ["dag_checkpoints.triggers.epoch_commit",
                                         "dag_checkpoints.triggers.epoch_deadline",
                                         "dag_checkpoints.triggers.expected_input"]}],
        "task-decorators": [
            {"name": "checkpointed_spark", "class-name":
             "dag_checkpoints.decorators.checkpointed_spark.checkpointed_spark_task"},
            {"name": "checkpointed_view", "class-name":
             "dag_checkpoints.decorators.checkpointed_view.checkpointed_view_task"}],
        # Alerts are delivered by Airflow's own notifiers (HttpNotifier, SmtpNotifier) that
        # dag_checkpoints.notifications configures: no notifier class of its own to declare.
        "notifications": [],
        # Connections are those of the Spark and Amazon providers: spark_connect (connect
        # mode), spark (submit mode), aws (S3 credentials).
        "connection-types": [],
        "config": {"dag_checkpoints": {
            "description": "DAG checkpoints: settings of the deployment (a DAG's own are its "
                           "CheckpointSettings).",
            "options": {"drills": {
                "description": "Let a run's conf (checkpoint.fault_inject) or the worker's "
                               "CKPT_FAULT_INJECT fail or hang a task after its snapshot, "
                               "for drills. Off: such a run fails in one line.",
                "version_added": "0.1.0", "type": "boolean", "example": "True",
                "default": "False"},
                "staleness_check_seconds": {
                "description": "How often each scheduler looks at every checkpointed DAG: "
                               "emits dag_checkpoints.last_completed_age, alerts once when "
                               "no epoch completed within max_epoch_age_seconds (runs or "
                               "no runs) and sends one resolved notice when one completes "
                               "again. 0 turns the watcher off.",
                "version_added": "0.2.0", "type": "float", "example": "60",
                "default": "60"}}}},
    }
