"""Airflow's tries of an epoch's tasks, for the Epochs page's task timeline.

The checkpoint knows each task's acknowledged attempt (its handle carries its timings) but
not when a failed attempt ran or how it ended: Airflow does, in its task instances and
their history. Read from Airflow's database, by the api-server that serves the page (the
route has checked the caller's right to read the DAG).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class TaskTry:
    """One try of a task instance as Airflow recorded it (``attempt``: Airflow's try
    number, which is the task's attempt in the epoch)."""

    task_id: str
    attempt: int
    state: str | None
    started_at: datetime | None
    ended_at: datetime | None

    @property
    def failed(self) -> bool:
        """The try ended in failure (or was failed and is to be retried)."""
        return self.state in ("failed", "up_for_retry", "restarting")

    def to_json(self, since: datetime) -> dict[str, Any]:
        """The try with its start and end in milliseconds after ``since`` (the barrier)."""
        def delay(t: datetime | None) -> float | None:
            return None if t is None else round((t - since).total_seconds() * 1000, 1)

        return {"attempt": self.attempt, "state": self.state,
                "started_delay_ms": delay(self.started_at),
                "ended_delay_ms": delay(self.ended_at)}


def task_tries(session: Any, dag_id: str, run_id: str) -> dict[str, list[TaskTry]]:
    """Every try of every task of the run, oldest first: the earlier tries from
    TaskInstanceHistory, the latest from TaskInstance (two queries)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from sqlalchemy import select

    out: dict[str, dict[int, TaskTry]] = {}
    for model in (TaskInstanceHistory, TaskInstance):
        rows = session.execute(
            select(model.task_id, model.try_number, model.state, model.start_date,
                   model.end_date)
            .where(model.dag_id == dag_id, model.run_id == run_id, model.map_index == -1))
        for task_id, try_number, state, start, end in rows:
            if not try_number:  # scheduled, never run
                continue
            out.setdefault(task_id, {})[try_number] = TaskTry(
                task_id, try_number, None if state is None else str(getattr(state, "value", state)),
                start, end)
    return {t: [tries[n] for n in sorted(tries)] for t, tries in out.items()}
