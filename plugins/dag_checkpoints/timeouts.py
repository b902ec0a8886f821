"""The checkpoint timeout, enforced from the scheduler side (Flink's checkpoint canceller).

An epoch's deadline is written in its barrier: ``timeout_seconds`` after the begin step
opened it, however long the run waited in the queue before (PROTOCOL 6.5). Each DAG run has
a ``checkpoint_timeout`` task, started right after the begin step, that defers to
:class:`EpochDeadlineTrigger` in the triggerer: an async poll of checkpoint storage that
costs no worker slot and no triggerer thread. It ends as soon as the epoch is decided
(the commit step completed or aborted it, an operator aborted it), read from what survives
retention, within about a second of the commit step; past the deadline with the epoch still pending,
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
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from airflow.triggers.base import (
    BaseTrigger,
    TaskFailedEvent,
    TaskSkippedEvent,
    TaskSuccessEvent,
    TriggerEvent,
)

from checkpointing import Barrier, Coordinator, EpochMetadata
from checkpointing.decision import Decision
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


#: How often the trigger asks Airflow whether the run's commit step has finished (one
#: call to Airflow's API, not to storage): the watchdog then reads the decision at once.
AIRFLOW_POLL_SECONDS = 1.0
_FINISHED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class EpochDeadlineTrigger(BaseTrigger):
    """Fires when the epoch is decided or its deadline has passed, whichever comes first.

    Storage is read every ``poll_seconds`` (the deadline's twentieth, at most 30 s), and at
    once when Airflow says the run's commit step finished: the decision is usually made
    there, so a run ends about a second after its commit step instead of a storage poll
    later (PROTOCOL 6.11). A decided epoch ends the watchdog from here, without resuming
    on a worker (success, or skipped/failed for an aborted epoch as the failure budget
    says); only a passed deadline resumes on a worker, which aborts and alerts.
    Storage calls run in a worker thread of the event loop's default executor, one short
    read at a time, so a slow store never blocks the triggerer's loop.
    """

    def __init__(self, checkpoint: dict[str, Any], epoch_id: int, deadline: str,
                 poll_seconds: float = MAX_POLL_SECONDS, dag_id: str | None = None,
                 run_id: str | None = None, commit_task_id: str | None = None):
        super().__init__()
        self.checkpoint, self.epoch_id, self.deadline = checkpoint, int(epoch_id), deadline
        self.poll_seconds = float(poll_seconds)
        self.dag_id, self.run_id, self.commit_task_id = dag_id, run_id, commit_task_id
        self._airflow_states = bool(dag_id and run_id and commit_task_id)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.EpochDeadlineTrigger",
                {"checkpoint": self.checkpoint, "epoch_id": self.epoch_id,
                 "deadline": self.deadline, "poll_seconds": self.poll_seconds,
                 "dag_id": self.dag_id, "run_id": self.run_id,
                 "commit_task_id": self.commit_task_id})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = CheckpointSettings.from_kwargs(self.checkpoint)
        coord = await asyncio.to_thread(settings.coordinator)
        deadline = parse_iso(self.deadline)
        next_read, commit_seen = 0.0, False
        while True:
            now = time.time()
            if now >= next_read:
                try:
                    decision = await asyncio.to_thread(coord.decision, self.epoch_id)
                except MalformedDocument as exc:
                    yield TriggerEvent({"epoch_id": self.epoch_id, "error": str(exc)})
                    return
                except CheckpointError as exc:  # storage unreachable for now: keep watching
                    self.log.warning("epoch %d: cannot read its outcome yet: %s",
                                     self.epoch_id, exc)
                    decision = None
                if decision is not None:
                    yield await asyncio.to_thread(self._end_event, coord, decision)
                    return
                next_read = now + self.poll_seconds
            if now >= deadline:
                yield TriggerEvent({"epoch_id": self.epoch_id, "status": "overdue"})
                return
            if not commit_seen and await self._commit_finished():
                # Read the decision now; once only: a commit step that failed without
                # deciding leaves the epoch to the ordinary polls and its deadline.
                commit_seen, next_read = True, 0.0
                continue
            wait = min(next_read, deadline) - time.time()
            if self._airflow_states and not commit_seen:
                wait = min(wait, AIRFLOW_POLL_SECONDS)
            await asyncio.sleep(max(0.05, wait))

    def _end_event(self, coord: Coordinator, decision: Decision) -> TriggerEvent:
        """End the watchdog from the triggerer, as :func:`watchdog_outcome` says."""
        state, message = watchdog_outcome(coord, decision)
        if state == "success":
            self.log.info("%s", message)
            return TaskSuccessEvent(xcoms={"return_value": decision.status})
        if state == "failed":
            self.log.error("%s", message)
            return TaskFailedEvent()
        self.log.warning("%s", message)
        return TaskSkippedEvent()

    async def _commit_finished(self) -> bool:
        """Whether Airflow has the run's commit step in a finished state (asked through
        the triggerer's own channel to Airflow's API, as Airflow's ExternalTaskSensor
        trigger does). Without that channel the trigger watches storage only."""
        if not self._airflow_states:
            return False
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
            from asgiref.sync import sync_to_async

            states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
                dag_id=self.dag_id, task_ids=[self.commit_task_id], run_ids=[self.run_id])
        except Exception as exc:  # noqa: BLE001 - no channel (an older triggerer): storage only
            self.log.info("cannot read Airflow's task states here (%s): watching storage only",
                          type(exc).__name__)
            self._airflow_states = False
            return False
        return (states or {}).get(self.run_id, {}).get(self.commit_task_id) in _FINISHED


def watchdog_outcome(coord: Coordinator, decision: Decision) -> tuple[str, str]:
    """(task state, log line) of the watchdog of a decided epoch: ``success`` when it
    completed; for an aborted one ``skipped`` within the failure budget, ``failed`` once the
    budget is spent."""
    if decision.completed:
        return "success", decision.describe()
    try:
        coord.check_failure_budget(decision.lineage or "main")
    except FailureBudgetExhausted as exc:
        return "failed", f"{decision.describe()}; checkpoint failure budget exhausted: {exc}"
    return "skipped", f"{decision.describe()}: within the failure budget"


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

    def __init__(self, *, settings: CheckpointSettings, begin_task_id: str,
                 commit_task_id: str | None = None, **kwargs: Any):
        # It must run whatever the jobs do, and never be retried into a second watch.
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.settings, self.begin_task_id = settings, begin_task_id
        self.commit_task_id = commit_task_id

    def execute(self, context: Any) -> str | None:
        epoch = context["ti"].xcom_pull(task_ids=self.begin_task_id)
        if epoch is None:
            raise AirflowFailException(f"no epoch to watch: {self.begin_task_id} has not run")
        coord = self.settings.coordinator()
        decision = coord.decision(int(epoch))
        if decision is not None:
            return self._decided(coord, decision)
        if _foreground_test_run(context):
            self.log.info("dags test: epoch %s is not watched (triggers run inline there); "
                          "the commit step decides it", epoch)
            return None
        barrier = coord.barrier(int(epoch))
        poll = min(MAX_POLL_SECONDS, max(1.0, self.settings.config.timeout_seconds / 20))
        self.log.info("watching epoch %d until its deadline %s", barrier.epoch_id,
                      barrier.deadline)
        run = context["dag_run"]
        self.defer(trigger=EpochDeadlineTrigger(self.settings.to_kwargs(), barrier.epoch_id,
                                                barrier.deadline, poll, run.dag_id,
                                                run.run_id, self.commit_task_id),
                   method_name="execute_complete")
        return None  # not reached: defer raises

    @staticmethod
    def _decided(coord: Coordinator, decision: Decision) -> str:
        """The outcome of an epoch decided before the watch began, as the trigger ends it
        (:func:`watchdog_outcome`)."""
        state, message = watchdog_outcome(coord, decision)
        if state == "failed":
            raise AirflowFailException(message)
        if state == "skipped":
            raise AirflowSkipException(message)
        return decision.status

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        if event.get("error"):
            raise AirflowFailException(f"epoch {event['epoch_id']}: {event['error']}")
        if event["status"] != "overdue":  # from a trigger of before 1.7
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
