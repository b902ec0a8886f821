"""The checkpoint part of a DAG run's conf (``{"checkpoint": {"lineage": ...,
"fault_inject": ..., "enabled": false}}``, written by backfills from a checkpoint, by
drills, and by whoever runs the DAG once without checkpointing) and the task ids of the
steps the provider adds to a DAG."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context


def checkpoint_conf(conf: dict[str, Any] | None) -> dict[str, Any]:
    """``conf["checkpoint"]`` of a run (empty when absent)."""
    return dict((conf or {}).get("checkpoint") or {})


def checkpointing_enabled(context: Context) -> bool:
    """False for a run triggered with ``{"checkpoint": {"enabled": false}}``: the same jobs
    without the checkpoint protocol (:mod:`spark_jobs.runtime.unchecked`)."""
    conf = checkpoint_conf(getattr(context.get("dag_run"), "conf", None))
    return conf.get("enabled", True) is not False


def foreground_test_run(context: Context) -> bool:
    """``airflow dags test`` / ``dag.test()``: tasks run one at a time and triggers inline,
    so a step that waits in the triggerer would block the run it waits for."""
    return getattr(context.get("dag_run"), "triggering_user_name", None) == "dag_test"


def data_interval(context: Context) -> dict[str, str] | None:
    """The run's data interval as the barrier records it (ISO strings), None without one."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        return None
    return {"start": start.isoformat(), "end": end.isoformat()}


#: Task ids of the steps :func:`~dag_checkpoints.checkpoint_dag` adds around the jobs.
BEGIN_TASK_ID = "checkpoint_begin"
COMMIT_TASK_ID = "checkpoint_commit"
TIMEOUT_TASK_ID = "checkpoint_timeout"
