"""The per-run checkpoint watchdog task (see :mod:`dag_checkpoints.shared.timeouts`)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from checkpointing import Coordinator
from checkpointing.protocol.decision import Decision

from ..hooks.checkpoint import CheckpointHook
from ..shared.runconf import checkpointing_enabled, foreground_test_run
from ..shared.settings import CheckpointSettings
from ..shared.timeouts import expire_epoch, watchdog_outcome
from ..task.task_epoch import storage_failures
from ..triggers.decision_read import decision_poll_seconds
from ..triggers.epoch_deadline import EpochDeadlineTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class EpochTimeoutOperator(BaseOperator):
    """Watches the run's epoch until it is decided; aborts and alerts it at its deadline.

    Deferrable: waits in the triggerer, not on a worker. Succeeds when the epoch is decided
    by the commit step or when a timeout stays within the failure budget; fails once the
    ``tolerable_failed_epochs`` budget is spent, as the commit step does.
    """

    ui_color = "#e5d8bd"

    def __init__(self, *, settings: CheckpointSettings, begin_task_id: str,
                 commit_task_id: str | None = None, **kwargs: Any):
        # Retried when its worker dies before it deferred (`make drills`' worker_kill found
        # one lost that way, failing a run whose epoch had completed): a retry watches the
        # same epoch again, reading its decision and deadline from storage, so it is
        # idempotent; a failure it decides (the budget spent) is final on the retry too.
        kwargs.setdefault("retries", 2)
        kwargs.setdefault("retry_delay", timedelta(seconds=5))
        super().__init__(**kwargs)
        self.settings, self.begin_task_id = settings, begin_task_id
        self.commit_task_id = commit_task_id

    @storage_failures
    def execute(self, context: Context) -> str | None:
        if not checkpointing_enabled(context):
            raise AirflowSkipException("checkpointing disabled for this run: no epoch to "
                                       "watch")
        epoch = context["ti"].xcom_pull(task_ids=self.begin_task_id)
        if epoch is None:
            raise AirflowFailException(f"no epoch to watch: {self.begin_task_id} has not run")
        coord = CheckpointHook(self.settings).get_coordinator()
        decision = coord.decision(int(epoch))
        if decision is not None:
            return self._decided(coord, decision)
        if foreground_test_run(context):
            self.log.info("dags test: epoch %s is not watched (triggers run inline there); "
                          "the commit step decides it", epoch)
            return None
        barrier = coord.barrier(int(epoch))
        poll = decision_poll_seconds(self.settings.config.timeout_seconds)
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

    @storage_failures
    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        if event.get("error"):
            raise AirflowFailException(f"epoch {event['epoch_id']}: {event['error']}")
        if event.get("fail"):  # decided, and the failure budget is spent (no retry)
            raise AirflowFailException(str(event["fail"]))
        if event["status"] != "overdue":  # from a trigger of before 1.7
            return str(event["status"])
        # The trigger could not expire the epoch itself (its storage call raised): the
        # worker does, and ends the task as the trigger would have (watchdog_outcome).
        coord = CheckpointHook(self.settings).get_coordinator()
        barrier = coord.barrier(int(event["epoch_id"]))
        meta = expire_epoch(self.settings, coord, barrier, context)
        if meta is None:  # its deadline has not passed on this worker's clock
            return "pending"
        # The abort's own log line and alert name the tasks that did not acknowledge.
        return self._decided(coord, Decision.of_metadata(meta))
