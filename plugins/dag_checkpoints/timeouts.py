"""The checkpoint timeout, enforced from the scheduler side (Flink's checkpoint canceller).

An epoch's deadline is written in its barrier: ``timeout_seconds`` after the begin step
opened it, however long the run waited in the queue before (PROTOCOL 6.5). Each DAG run has
a ``checkpoint_timeout`` task, started right after the begin step, that defers to
:class:`EpochDeadlineTrigger` in the triggerer: an async poll of checkpoint storage that
costs no worker slot and no triggerer thread. It returns as soon as the epoch is decided
(the commit step completed or aborted it); past the deadline with the epoch still pending,
the task resumes on a worker and aborts the epoch with reason ``timeout``, naming the tasks
that did not acknowledge, and alerts once, while the run's other tasks may still be running.

Every begin step also expires every other overdue epoch of the pipeline (a run whose
watchdog was lost), with the same alert.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from checkpointing import Barrier, Coordinator, EpochMetadata
from checkpointing.documents import parse_iso
from checkpointing.errors import CheckpointError, FailureBudgetExhausted, MalformedDocument

from .alerts import announce, log
from .settings import CheckpointSettings

TIMEOUT_TASK_ID = "checkpoint_timeout"
#: How often the trigger looks at storage: one HEAD-sized read per poll.
MAX_POLL_SECONDS = 30.0


def expire_epoch(settings: CheckpointSettings, coord: Coordinator, barrier: Barrier,
                 context: dict[str, Any] | None = None) -> EpochMetadata | None:
    """Decide an epoch past its barrier's deadline: complete it if every task acknowledged
    (its commit step died), else abort it with reason ``timeout``; alert once. Returns None,
    touching nothing, when the deadline has not passed."""
    if parse_iso(barrier.deadline) > coord.clock():
        return None
    meta = coord.try_complete(barrier.epoch_id)
    if meta is None:
        meta = coord.abort(barrier.epoch_id, "timeout",
                           f"not completed within {settings.config.timeout_seconds:g}s of its "
                           f"barrier (deadline {barrier.deadline})")
    announce(coord, meta, barrier, settings.alerts, context)
    return meta


class EpochDeadlineTrigger(BaseTrigger):
    """Fires when the epoch is decided or its deadline has passed, whichever comes first.

    Storage calls run in a worker thread of the event loop's default executor, one short
    read at a time, so a slow store never blocks the triggerer's loop.
    """

    def __init__(self, checkpoint: dict[str, Any], epoch_id: int, deadline: str,
                 poll_seconds: float = MAX_POLL_SECONDS):
        super().__init__()
        self.checkpoint, self.epoch_id, self.deadline = checkpoint, int(epoch_id), deadline
        self.poll_seconds = float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.EpochDeadlineTrigger",
                {"checkpoint": self.checkpoint, "epoch_id": self.epoch_id,
                 "deadline": self.deadline, "poll_seconds": self.poll_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = CheckpointSettings.from_kwargs(self.checkpoint)
        coord = await asyncio.to_thread(settings.coordinator)
        deadline = parse_iso(self.deadline)
        while True:
            try:
                meta = await asyncio.to_thread(coord.metadata, self.epoch_id)
            except MalformedDocument as exc:
                yield TriggerEvent({"epoch_id": self.epoch_id, "error": str(exc)})
                return
            except CheckpointError as exc:  # storage unreachable for now: keep watching
                self.log.warning("epoch %d: cannot read its outcome yet: %s", self.epoch_id, exc)
                meta = None
            if meta is not None:
                yield TriggerEvent({"epoch_id": self.epoch_id, "status": meta.status})
                return
            remaining = deadline - time.time()
            if remaining <= 0:
                yield TriggerEvent({"epoch_id": self.epoch_id, "status": "overdue"})
                return
            await asyncio.sleep(min(self.poll_seconds, remaining))


def _foreground_test_run(context: Any) -> bool:
    """``airflow dags test`` / ``dag.test()`` run triggers inline, one task at a time: a
    watchdog there would block the run it watches until the deadline."""
    dag_run = context.get("dag_run")
    return getattr(dag_run, "triggering_user_name", None) == "dag_test"


class EpochTimeoutOperator(BaseOperator):
    """Watches the run's epoch until it is decided; aborts and alerts it at its deadline.

    Deferrable: waits in the triggerer, not on a worker. Succeeds when the epoch is decided
    by the commit step or when a timeout stays within the failure budget; fails once the
    ``tolerable_failed_epochs`` budget is spent, as the commit step does.
    """

    ui_color = "#e5d8bd"

    def __init__(self, *, settings: CheckpointSettings, begin_task_id: str, **kwargs: Any):
        # It must run whatever the jobs do, and never be retried into a second watch.
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.settings, self.begin_task_id = settings, begin_task_id

    def execute(self, context: Any) -> str | None:
        epoch = context["ti"].xcom_pull(task_ids=self.begin_task_id)
        if epoch is None:
            raise AirflowFailException(f"no epoch to watch: {self.begin_task_id} has not run")
        coord = self.settings.coordinator()
        meta = coord.metadata(int(epoch))
        if meta is not None:
            return meta.status
        if _foreground_test_run(context):
            self.log.info("dags test: epoch %s is not watched (triggers run inline there); "
                          "the commit step decides it", epoch)
            return None
        barrier = coord.barrier(int(epoch))
        poll = min(MAX_POLL_SECONDS, max(1.0, self.settings.config.timeout_seconds / 20))
        self.log.info("watching epoch %d until its deadline %s", barrier.epoch_id,
                      barrier.deadline)
        self.defer(trigger=EpochDeadlineTrigger(self.settings.to_kwargs(), barrier.epoch_id,
                                                barrier.deadline, poll),
                   method_name="execute_complete")
        return None  # not reached: defer raises

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        if event.get("error"):
            raise AirflowFailException(f"epoch {event['epoch_id']}: {event['error']}")
        if event["status"] != "overdue":
            return str(event["status"])
        coord = self.settings.coordinator()
        barrier = coord.barrier(int(event["epoch_id"]))
        meta = expire_epoch(self.settings, coord, barrier, context)
        if meta is None or meta.completed:
            return "completed" if meta else "pending"
        msg = (f"epoch {meta.epoch_id} {meta.reason}: {meta.detail}; tasks not acknowledged: "
               f"{', '.join(meta.missing_tasks) or 'none'}")
        try:
            coord.check_failure_budget(barrier.lineage)
        except FailureBudgetExhausted as exc:
            raise AirflowFailException(f"{msg}; checkpoint failure budget exhausted: "
                                       f"{exc}") from None
        log.warning("%s: within the failure budget", msg)
        return meta.status
