"""Work-arounds for Airflow defects that break checkpointed DAGs, each applied only while
the installed Airflow still has the defect (checked on its source), so that an Airflow
with the fix runs its own code.

- apache/airflow#70368 (open, Airflow 3.3.0 and later): clearing a DAG run, or a backfill
  that reprocesses existing runs, answers 500 when the DAG has a Deadline Alert on the
  run's ``queued_at``. Every checkpointed DAG has one (:func:`dag_checkpoints.deadline_alert`).
  Since 3.3.0 the alert's interval is stored as JSON (the serde envelope of a
  ``timedelta``), and the clear path hands that dict to ``timedelta(seconds=...)``.
"""

from __future__ import annotations

import inspect
import logging
from datetime import datetime, timedelta
from typing import Any

log = logging.getLogger(__name__)

_DEFECT_70368 = "timedelta(seconds=deadline_alert.interval)"


def apply() -> list[str]:
    """Apply every work-around the installed Airflow needs; the issues applied."""
    return ["apache/airflow#70368"] if fix_queued_at_deadline_recalculation() else []


def fix_queued_at_deadline_recalculation() -> bool:
    """Replace ``_recalculate_dagrun_queued_at_deadlines`` (called by every clear) with one
    that decodes the stored interval first, as Airflow's run creation does. True when the
    replacement is in place."""
    try:
        from airflow.models import taskinstance
    except Exception:  # noqa: BLE001 - not an Airflow server process (a bare client)
        return False
    original = getattr(taskinstance, "_recalculate_dagrun_queued_at_deadlines", None)
    if original is None:
        return False
    if getattr(original, "ckpt_work_around", False):
        return True
    try:
        defective = _DEFECT_70368 in inspect.getsource(original)
    except (OSError, TypeError):
        defective = False
    if not defective:
        return False

    def recalculate(dagrun: Any, new_queued_at: datetime, session: Any) -> None:
        """The deadlines of ``dagrun`` counted from its ``queued_at``, moved to the new
        ``queued_at`` (Airflow's function, with the interval decoded)."""
        from airflow.models.deadline import Deadline, ReferenceModels
        from airflow.models.deadline_alert import DeadlineAlert as DeadlineAlertModel
        from sqlalchemy import false, select

        rows = session.execute(
            select(Deadline, DeadlineAlertModel)
            .join(DeadlineAlertModel, Deadline.deadline_alert_id == DeadlineAlertModel.id)
            .where(
                Deadline.dagrun_id == dagrun.id,
                Deadline.missed == false(),
                DeadlineAlertModel.reference[ReferenceModels.REFERENCE_TYPE_FIELD].as_string()
                == ReferenceModels.DagRunQueuedAtDeadline.__name__,
            )
        ).all()
        for deadline, alert in rows:
            deadline.deadline_time = new_queued_at + stored_interval(alert.interval)

    recalculate.ckpt_work_around = True  # type: ignore[attr-defined]
    taskinstance._recalculate_dagrun_queued_at_deadlines = recalculate
    log.info("work-around for apache/airflow#70368 applied (clearing runs of DAGs with a "
             "queued-at Deadline Alert)")
    return True


def stored_interval(raw: Any) -> timedelta:
    """A Deadline Alert's interval as Airflow stores it: seconds (before 3.3) or the serde
    envelope of a ``timedelta`` or of a variable-backed interval (3.3)."""
    if isinstance(raw, int | float):
        return timedelta(seconds=raw)
    from airflow.sdk.serde import deserialize

    value = deserialize(raw)
    if not isinstance(value, timedelta) and callable(getattr(value, "resolve", None)):
        value = value.resolve()  # type: ignore[attr-defined]  # a VariableInterval's value now
    if not isinstance(value, timedelta):
        raise TypeError(f"Deadline Alert interval of type {type(value).__name__}")
    return value
