"""The checkpoint part of a DAG run's conf (``{"checkpoint": {"lineage": ...,
"fault_inject": ...}}``, written by backfills from a checkpoint and by drills) and the task
ids of the steps the provider adds to a DAG."""

from __future__ import annotations

from typing import Any


def checkpoint_conf(conf: dict[str, Any] | None) -> dict[str, Any]:
    """``conf["checkpoint"]`` of a run (empty when absent)."""
    return dict((conf or {}).get("checkpoint") or {})


#: Task ids of the steps :func:`~dag_checkpoints.checkpoint_dag` adds around the jobs.
BEGIN_TASK_ID = "checkpoint_begin"
COMMIT_TASK_ID = "checkpoint_commit"
TIMEOUT_TASK_ID = "checkpoint_timeout"
