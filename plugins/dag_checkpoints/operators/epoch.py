"""The steps around a DAG run's checkpointed jobs: the begin step opens the run's epoch
beside its root jobs (which may open it first), the commit step, beside the jobs too,
finishes it: asset events once the last acknowledgement completed it, or completion or
abort once the jobs are done.
The jobs themselves are :class:`dag_checkpoints.operators.CheckpointedSparkOperator`."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
)

from checkpointing import TaskPlan, run_retention
from checkpointing.errors import (
    CheckpointError,
    EpochNotFound,
    FailureBudgetExhausted,
)
from checkpointing.protocol.barrier import plan_to_json
from checkpointing.protocol.epoch_metadata import AbortReason
from checkpointing.redaction import redact

from ..hooks.checkpoint import CheckpointHook
from ..notifications import announce
from ..shared.runconf import BEGIN_TASK_ID, checkpointing_enabled, foreground_test_run
from ..shared.settings import CheckpointSettings
from ..task.drills import fault_spec
from ..task.task_epoch import (
    epoch_begun_by_a_job,
    open_run_epoch,
    run_ended,
    storage_failures,
    task_states,
)
from ..triggers.decision_read import decision_poll_seconds
from ..triggers.epoch_commit import EpochCommitTrigger
from ..triggers.task_states import FINISHED
from .table_version_wait import AwaitsTableVersions

if TYPE_CHECKING:
    from airflow.sdk import Context

    from checkpointing import Coordinator


class BeginEpochOperator(AwaitsTableVersions, BaseOperator):
    """Opens the run's epoch, or joins it, and returns the epoch id (XCom).

    It runs beside the run's root jobs, which begin or join the same epoch themselves
    (:mod:`dag_checkpoints.task.task_epoch`): no job waits for it. Its success marks the epoch as
    the run's, so that a retried job joins it; the watchdog and the commit step read the
    epoch from it. Idempotent per DAG run: a cleared or retried begin step reuses the run's
    open epoch. When a table input expects a new version, it waits for it before beginning,
    deferred, as the root jobs do (:mod:`dag_checkpoints.shared.expected_inputs`).
    """

    ui_color = "#b3e2cd"

    def __init__(self, *, settings: CheckpointSettings, plan: dict[str, TaskPlan],
                 allow_non_restored_state: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.settings, self.plan = settings, plan
        self.allow_non_restored_state = allow_non_restored_state
        # Serialized with the DAG (get_serialized_fields): the api-server never parses DAG
        # files, and previews a backfill against the plan and inputs deployed now. JSON
        # text, since Airflow deserializes fields of its own only.
        self.checkpoint_plan = json.dumps(plan_to_json(plan), sort_keys=True)
        self.checkpoint_inputs = json.dumps(
            {"data": settings.data, "daily": list(settings.daily_inputs),
             "allow_non_restored_state": allow_non_restored_state}, sort_keys=True)
        # The DAG's own settings (storage, pipeline id, policies, alerts; connection ids,
        # no secrets), so that the plugin's routes act on this DAG's storage, whatever
        # the api-server's environment says.
        self.checkpoint_settings = json.dumps(settings.to_kwargs(), sort_keys=True)

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        return frozenset(super().get_serialized_fields()
                         | {"checkpoint_plan", "checkpoint_inputs", "checkpoint_settings"})

    @storage_failures
    def execute(self, context: Context) -> int:
        if not checkpointing_enabled(context):
            return self._unchecked(context)
        fault_spec(context)  # a refused drill begins no epoch (nothing aborted, no page)
        self._register_settings(context["dag_run"].dag_id)
        begun = epoch_begun_by_a_job(self.settings, context)
        if begun is not None:
            self.log.info("run works for epoch %d, begun by one of its jobs", begun)
            return begun
        self._await_table_versions(context, self.settings, self.plan)
        return open_run_epoch(self.settings, self.plan, context, self.allow_non_restored_state)

    def _register_settings(self, dag_id: str) -> None:
        """Where the Deadline Alert's callback finds this DAG's settings by its id
        (:mod:`..shared.registered_settings`). The per-epoch watchdog enforces the timeout; a
        failure here costs only its backstop, so it is logged, not raised."""
        from ..shared.registered_settings import register, variable_key

        try:
            if register(self.settings, dag_id):
                self.log.info("checkpoint settings registered as Variable %s",
                              variable_key(dag_id))
        except Exception as exc:  # noqa: BLE001 - the epoch begins without its backstop
            self.log.warning("checkpoint settings not registered (the checkpoint-timeout "
                             "Deadline Alert cannot expire this run's epoch): %s",
                             type(exc).__name__)

    def _unchecked(self, context: Context) -> int:
        """A run with checkpointing disabled opens no epoch (epoch 0 for its tasks); it
        clears what earlier such runs left in their scratch."""
        deleted = CheckpointHook(self.settings).get_coordinator().unchecked_run(
            context["dag_run"].run_id).clear_earlier_runs()
        self.log.info("checkpointing disabled for this run: no epoch, no checkpoint written "
                      "(%d file(s) of earlier unchecked runs deleted)", deleted)
        return 0


#: How long a resumed commit step waits on its worker for the last acknowledgement before
#: it hands the wait back to the triggerer (a long last job must not hold a worker slot).
WORKER_WAIT_SECONDS = 30.0


class CommitEpochOperator(BaseOperator):
    """Finishes the run's epoch: emits its outputs' asset events once it completed, or
    completes or aborts it when its jobs are done and it is still undecided.

    It runs beside the jobs, not after them: right after the begin step it defers to
    :class:`~dag_checkpoints.triggers.EpochCommitTrigger` (no worker held) until the last
    jobs run, then resumes and waits on its worker (at most ``WORKER_WAIT_SECONDS``, else
    in the triggerer again) until the epoch is decided, which the last leaf job's
    acknowledgement usually does (PROTOCOL 6.5), or until every job has finished. An epoch
    that cannot complete is aborted then (not left to its timeout), naming the task that
    failed. It succeeds only when the epoch completed and published, emitting its outlets'
    asset events then; an aborted epoch within the tolerable-failure budget (or a
    backfill's intermediate epoch) skips it, and the DAG run fails with a clear message
    once the budget is spent.
    """

    ui_color = "#b3e2cd"

    def __init__(self, *, settings: CheckpointSettings, begin_task_id: str = BEGIN_TASK_ID,
                 job_task_ids: list[str] | tuple[str, ...] = (), **kwargs: Any):
        kwargs.setdefault("trigger_rule", "all_done")
        # Retried: Airflow 3.3's scheduler can fail a task resumed soon after it deferred,
        # when it reads the executor's stale "success" of the deferring process after the
        # resumed try was queued or started ("state mismatch"; apache/airflow#67287,
        # #71580, #72716, open). Every step here is idempotent, so a retry finishes the
        # same epoch; a failure it decides (the budget spent) is final.
        kwargs.setdefault("retries", 2)
        kwargs.setdefault("retry_delay", timedelta(seconds=5))
        super().__init__(**kwargs)
        self.settings, self.begin_task_id = settings, begin_task_id
        #: the checkpointed jobs it waits for (:func:`~dag_checkpoints.checkpoint_dag`)
        self.job_task_ids = sorted(job_task_ids)
        #: the epoch this task decided, for the OpenLineage provider's call after execute
        self._lineage_epoch: int | None = None

    @storage_failures
    def execute(self, context: Context) -> int | None:
        enabled = checkpointing_enabled(context)
        epoch = 0
        if enabled:
            fault_spec(context)  # the run's drill was refused: no epoch to commit
            found = context["ti"].xcom_pull(task_ids=self.begin_task_id)
            if found is None:
                raise AirflowFailException("no epoch to commit: the begin step did not run")
            epoch = int(found)
        coord = CheckpointHook(self.settings).get_coordinator()
        decided = enabled and coord.decision(epoch) is not None
        if not decided and not self._jobs_finished(context):
            self._wait(context, epoch)
        return self._finish(context, epoch, coord)

    @storage_failures
    def execute_complete(self, context: Context, event: dict[str, Any]) -> int | None:
        """Resumed by the trigger: the epoch was decided, every job finished, or the last
        jobs run (then it waits here for their acknowledgement, a bounded while)."""
        if event.get("error"):
            raise AirflowFailException(f"epoch {event['epoch_id']}: {event['error']}")
        epoch, coord = int(event["epoch_id"]), CheckpointHook(self.settings).get_coordinator()
        if event.get("status") == "last_level" and not self._await_end(context, epoch, coord):
            self._wait(context, epoch, fire_on_last_level=False)
        return self._finish(context, epoch, coord)

    def _await_end(self, context: Context, epoch: int, coord: Coordinator) -> bool:
        """Wait on this worker, at most ``WORKER_WAIT_SECONDS``, for the epoch's decision
        (read every 0.2 s; epoch 0, checkpointing disabled, has none) or the jobs' end
        (asked each second); False when neither came."""
        start = next_ask = time.monotonic()
        while time.monotonic() - start < WORKER_WAIT_SECONDS:
            if epoch and coord.decision(epoch) is not None:
                return True
            if time.monotonic() >= next_ask:
                if self._jobs_finished(context):
                    return True
                next_ask = time.monotonic() + 1.0
            time.sleep(0.2)
        self.log.info("epoch %d: not decided within %ss of its last jobs' start: waiting "
                      "in the triggerer again", epoch, WORKER_WAIT_SECONDS)
        return False

    def _jobs_finished(self, context: Context) -> bool:
        states = task_states(context)
        return all(states.get(t) in FINISHED for t in self.job_task_ids)

    def _wait(self, context: Context, epoch: int, fire_on_last_level: bool = True) -> None:
        """Wait for the epoch's decision or the jobs' end without holding a worker. Never
        returns: it defers (or, under ``dags test``, which runs one task at a time and
        triggers inline, asks to be run again in a second)."""
        if foreground_test_run(context):
            raise AirflowRescheduleException(datetime.now(UTC) + timedelta(seconds=1))
        run = context["dag_run"]
        poll = decision_poll_seconds(self.settings.config.timeout_seconds)
        self.defer(trigger=EpochCommitTrigger(self.settings.to_kwargs(), epoch, run.dag_id,
                                              run.run_id, self.job_task_ids, poll,
                                              fire_on_last_level),
                   method_name="execute_complete")

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The OpenLineage provider's call (only when it is configured): the table outputs
        the epoch published, with their committed versions (:mod:`..shared.lineage`)."""
        from ..shared.lineage import commit_lineage

        epoch = self._lineage_epoch
        if not epoch:
            from airflow.providers.openlineage.extractors import OperatorLineage

            return OperatorLineage()
        return commit_lineage(CheckpointHook(self.settings).get_coordinator(), epoch)

    get_openlineage_facets_on_failure = get_openlineage_facets_on_complete

    def _finish(self, context: Context, epoch: int, coord: Coordinator) -> int | None:
        self._lineage_epoch = epoch
        if not checkpointing_enabled(context):
            self._unchecked(context)
        def detail(missing: list[str]) -> str:
            failed, not_run = _failed_and_not_run(context, missing)
            return (f"task(s) {failed or missing} failed without acknowledging"
                    + (f"; not run: {not_run}" if not_run and failed else ""))

        ended = run_ended(context)
        if ended is not None:
            # The run was ended in Airflow (marked, or failed at its dagrun_timeout) and its
            # tasks stopped: an operator's decision, as the DAG-run listener records it,
            # whichever of the two decides first; not a task's failure to blame.
            meta = coord.complete_or_abort(
                epoch, AbortReason.CANCELLED,
                f"its DAG run ended {'successful' if ended == 'success' else ended} before "
                "the epoch was decided (ended in Airflow)")
        else:
            meta = coord.complete_or_abort(
                epoch, AbortReason.DECLINED, detail,
                declined_by=lambda missing: next(
                    iter(_failed_and_not_run(context, missing)[0] or missing), None))
        if meta.completed:
            self._retain(coord)
            if not coord.barrier(meta.epoch_id).publish_on_complete:
                # Asset events mean "new data published": none for this epoch.
                raise AirflowSkipException(f"epoch {meta.epoch_id} completed; it publishes "
                                           "nothing (not the backfill's last run)")
            self._emit_asset_events(context, coord)
            self.log.info("epoch %d completed and published", meta.epoch_id)
            return meta.epoch_id
        try:
            barrier = coord.barrier(epoch)
        except EpochNotFound:  # aborted and deleted by retention before this try ran
            barrier = None
        # Announced before retention runs, so that the alert is in the history with the
        # failure record (the coordinator's abort hook usually did it already: once only).
        announce(coord, meta, barrier, self.settings.alerts, context)
        self._retain(coord)
        try:
            coord.check_failures(meta.lineage)
        except FailureBudgetExhausted as exc:
            raise AirflowFailException(f"epoch {meta.epoch_id} aborted ({meta.reason}: "
                                       f"{meta.detail}); checkpoint failure budget "
                                       f"exhausted: {exc}") from None
        # Skipped, not succeeded: a success would emit the outlets' asset events.
        raise AirflowSkipException(
            f"epoch {meta.epoch_id} aborted ({meta.reason}: {meta.detail}): within the "
            "failure budget, the next epoch picks up its input; nothing published")

    def _unchecked(self, context: Context) -> None:
        """A run with checkpointing disabled has no epoch to complete; its tasks committed
        their tables themselves. The run fails when one of them failed (else skipped, as
        the watchdog: no asset event for a run outside the checkpoints)."""
        states = task_states(context)
        failed = [t for t in self.job_task_ids if states.get(t) == "failed"]
        if failed:
            not_run = [t for t in self.job_task_ids if states.get(t) == "upstream_failed"]
            raise AirflowFailException(f"run with checkpointing disabled: task(s) {failed} "
                                       f"failed" + (f"; not run: {not_run}" if not_run else ""))
        raise AirflowSkipException("checkpointing disabled for this run: no epoch to "
                                   "complete (each task committed its tables itself)")

    def _emit_asset_events(self, context: Context, coord: Coordinator) -> None:
        """Fill the outlets' asset events with what this epoch published."""
        from ..shared.assets import event_extra

        manifest = coord.catalog.manifest()
        events = context.get("outlet_events")
        for asset in self.outlets or []:
            output = (getattr(asset, "extra", None) or {}).get("output")
            if manifest is not None and events is not None and isinstance(output, str) \
                    and output in manifest.outputs:
                events[asset].extra = event_extra(manifest, output)

    def _retain(self, coord: Coordinator) -> None:
        """Retention after each decision, as Flink does on completion: old and aborted
        epochs go, files still referenced stay. Never fails the commit."""
        try:
            rep = run_retention(coord)
        except CheckpointError as exc:
            self.log.warning("retention skipped: %s", redact(str(exc), *self.settings.roots))
            return
        if rep.deleted_epochs:
            self.log.info("retention deleted epoch(s) %s (%d objects, %d shared files, "
                          "%d staged table files)", rep.deleted_epochs, rep.deleted_objects,
                          rep.deleted_shared, rep.deleted_staged)


def _failed_and_not_run(context: Context, missing: list[str]) -> tuple[list[str], list[str]]:
    """Split the tasks that did not acknowledge into those that failed (Airflow's state of
    the task in this run) and those that never ran (upstream failed, skipped, ...)."""
    by_task = task_states(context)
    failed = [t for t in missing if by_task.get(t) == "failed"]
    return failed, [t for t in missing if t not in failed]
