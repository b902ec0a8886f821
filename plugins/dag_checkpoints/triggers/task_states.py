"""Airflow's state of some tasks of one DAG run, read from a trigger (the triggerer's own
channel to Airflow's API, as Airflow's ExternalTaskSensor trigger reads them)."""

from __future__ import annotations

from typing import Any

#: The states in which a task instance will not run again in this run unless cleared.
FINISHED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class NoStateChannel(Exception):
    """This triggerer cannot read task states (an older Airflow): watch storage only."""


async def run_task_states(dag_id: str, run_id: str, task_ids: list[str]) -> dict[str, Any]:
    """``{task_id: state}`` of ``task_ids`` in the run (a task not yet created is absent).

    :raises NoStateChannel: when the triggerer offers no channel to Airflow's API.
    """
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
        from asgiref.sync import sync_to_async

        states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
            dag_id=dag_id, task_ids=list(task_ids), run_ids=[run_id])
    except Exception as exc:  # noqa: BLE001 - no channel (an older triggerer)
        raise NoStateChannel(type(exc).__name__) from exc
    return dict((states or {}).get(run_id, {}))
