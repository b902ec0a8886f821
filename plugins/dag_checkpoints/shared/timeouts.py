"""The checkpoint timeout rule (Flink's checkpoint canceller), shared by its enforcers.

An epoch's deadline is written in its barrier: ``timeout_seconds`` after the begin step
opened it, however long the run waited in the queue before (PROTOCOL 6.5). Three things
enforce it, all through :func:`expire_epoch`:

- each DAG run's ``checkpoint_timeout`` task (:class:`~dag_checkpoints.operators.
  EpochTimeoutOperator`), started right after the begin step, which defers to
  :class:`~dag_checkpoints.triggers.EpochDeadlineTrigger` in the triggerer and ends as soon
  as the epoch is decided, or aborts it at its deadline with reason ``timeout``, naming the
  tasks that did not acknowledge, and alerts once, while the run's other tasks may still run;
- a DAG-level Deadline Alert (:func:`deadline_alert`), the backstop for a run whose
  watchdog is gone or not started yet: :func:`deadline_missed` runs in the triggerer and
  expires the epoch at its deadline;
- every begin step, which expires every other overdue epoch of the pipeline.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from checkpointing import Barrier, Coordinator, EpochMetadata
from checkpointing.errors import FailureBudgetExhausted
from checkpointing.protocol.decision import Decision
from checkpointing.protocol.documents import parse_iso

from ..hooks.checkpoint import CheckpointHook
from ..notifications import announce
from .runconf import checkpoint_conf
from .settings import CheckpointSettings

log = logging.getLogger("dag_checkpoints.shared.timeouts")


def expire_epoch(settings: CheckpointSettings, coord: Coordinator, barrier: Barrier,
                 context: Mapping[str, Any] | None = None) -> EpochMetadata | None:
    """Decide an epoch past its barrier's deadline: complete it if every task acknowledged
    (its commit step died), else abort it with reason ``timeout``; alert once. Returns None,
    touching nothing, when the deadline has not passed."""
    meta = coord.expire(barrier)
    if meta is None:
        return None
    announce(coord, meta, barrier, settings.alerts, context)
    return meta


def watchdog_outcome(coord: Coordinator, decision: Decision) -> tuple[str, str]:
    """(task state, log line) of the watchdog of a decided epoch: ``success`` when it
    completed; for an aborted one ``skipped`` within the failure budget, ``failed`` once the
    budget is spent."""
    if decision.completed:
        return "success", decision.describe()
    try:
        coord.check_failures(decision.lineage or "main")
    except FailureBudgetExhausted as exc:
        return "failed", f"{decision.describe()}; checkpoint failure budget exhausted: {exc}"
    return "skipped", f"{decision.describe()}: within the failure budget"


#: apache/airflow#73428 (open; Airflow 3.3.1 and 3.3.2): `airflow dags test` of a DAG with
#: a Deadline Alert crashes once the run succeeded ('dict' object has no attribute 'hex'),
#: exiting non-zero: `DAG.test()` keeps the alerts serialized, and `DagRun.update_state`
#: looks each one up as a stored alert's id. This is the line that does so.
_DEFECT_73428 = ("DeadlineAlertModel.get_by_id(alert_id, session=session) "
                 "for alert_id in dag.deadline")


@functools.cache  # Airflow's source does not change within a process
def dags_test_crashes_on_deadline_alerts() -> bool:
    """Whether the installed Airflow still has apache/airflow#73428 (read on its source, so
    that an Airflow with the fix keeps the alert in `dags test` too). Unreadable source
    counts as the defect: leaving the alert out of a test run only loses a backstop."""
    try:
        from airflow.models.dagrun import DagRun

        return _DEFECT_73428 in inspect.getsource(DagRun.update_state)
    except Exception:  # noqa: BLE001 - no source shipped, or no Airflow core here
        return True


def deadline_alert(settings: Any) -> Any | None:
    """A DAG-level Deadline Alert, the run-level backstop of the checkpoint timeout: when a
    run is not finished ``timeout_seconds`` after it was queued, :func:`deadline_missed`
    runs in the triggerer and expires the run's epoch if its own deadline (counted from its
    barrier) has passed. The per-epoch watchdog task (``checkpoint_timeout``) is what
    enforces the timeout; this alert only catches an epoch whose watchdog is gone.
    ``settings`` is the DAG's CheckpointSettings."""
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    if sys.argv[1:3] == ["dags", "test"] and dags_test_crashes_on_deadline_alerts():
        # A foreground test run has no triggerer to fire the alert anyway. `dags test` is
        # told by the command line: a DAG file is parsed before anything else says so.
        log.warning("airflow dags test: the checkpoint-timeout Deadline Alert is left out "
                    "(apache/airflow#73428)")
        return None
    # The callback runs in the triggerer, which has neither the DAG file nor the database:
    # its kwargs, stored with the serialized DAG and shown in lineage events, carry the
    # pipeline id only; it finds the settings the begin step registered (registered_settings).
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=settings.config.timeout_seconds),
        callback=AsyncCallback(f"{__name__}.deadline_missed",
                               kwargs={"pipeline_id": settings.pipeline_id}),
        name="checkpoint timeout",
    )


async def deadline_missed(context: Mapping[str, Any] | None = None, *, pipeline_id: str = "",
                          checkpoint: dict[str, Any] | None = None, **_: Any) -> None:
    """Deadline Alert callback (triggerer): expires the run's epoch at the epoch's own
    deadline. Airflow fires it ``timeout_seconds`` after the run was queued; the epoch's
    deadline counts from its barrier, written when the begin step ran, so it comes later
    by as long as the run waited for that step (seconds, or minutes on a busy deployment).
    The callback waits for it in the triggerer's event loop, holding no thread: returning
    at once would leave a run whose watchdog is gone, or not yet started, to the next run's
    begin step. Returns nothing: Airflow stores a callback's result in a text column,
    and a dict there killed the triggerer. ``checkpoint`` (the settings themselves) is
    what DAGs serialized by earlier versions pass."""
    try:
        found = await asyncio.to_thread(_open_epoch, context or {}, checkpoint)
        if found is None:
            return
        settings, coord, barrier = found
        deadline = parse_iso(barrier.deadline)
        if deadline > coord.clock():
            log.info("deadline missed for run %s; its epoch %d opened later and is expired at "
                     "its own deadline %s unless decided before", barrier.run_id,
                     barrier.epoch_id, barrier.deadline)
        while (wait := deadline - coord.clock()) > 0:
            await asyncio.sleep(wait + 0.05)
        # Decided meanwhile (completed, or aborted by its watchdog): that decision is
        # returned and nothing is alerted twice (the alert record is created once).
        meta = await asyncio.to_thread(expire_epoch, settings, coord, barrier, context or {})
        log.info("deadline missed for run %s: its epoch %d of %s is %s", barrier.run_id,
                 barrier.epoch_id, settings.pipeline_id,
                 f"{meta.status} ({meta.reason})" if meta and meta.reason
                 else meta.status if meta else "not past its deadline")
    except Exception:  # the triggerer must survive whatever storage says
        log.exception("checkpoint deadline callback failed")


def _open_epoch(context: Mapping[str, Any], checkpoint: dict[str, Any] | None
                ) -> tuple[CheckpointSettings, Coordinator, Barrier] | None:
    """(settings, coordinator, barrier) of the run's open epoch; None when it has none."""
    from .registered_settings import registered

    dag_run = context.get("dag_run") or {}
    run_id, dag_id = dag_run.get("dag_run_id"), str(dag_run.get("dag_id") or "")
    found = CheckpointSettings.from_kwargs(checkpoint) if checkpoint else registered(dag_id)
    if found is None:
        log.info("deadline missed for run %s of %s, whose begin step never ran: no epoch "
                 "to expire", run_id, dag_id)
        return None
    settings = found
    coord = CheckpointHook(settings).get_coordinator()
    barrier = (coord.open_epoch_for_run(run_id, lineage=_lineage_of(context))
               if run_id else None)
    if barrier is None:
        log.info("deadline missed for run %s, which has no open epoch of %s (queued, or "
                 "already decided)", run_id, settings.pipeline_id)
        return None
    return settings, coord, barrier


def _lineage_of(context: Mapping[str, Any]) -> str:
    return str(checkpoint_conf((context.get("dag_run") or {}).get("conf")).get("lineage")
               or "main")
