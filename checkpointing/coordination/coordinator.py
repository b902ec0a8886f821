"""The checkpoint coordinator (Flink's CheckpointCoordinator) for one pipeline.

It is stateless between calls except for caches of immutable documents (barriers and
decided ``_metadata``, kept by its :class:`EpochStore`), so any number of processes (the
Airflow scheduler, task processes, the CLI) can use it at once: every decision goes through
a conditional write in storage.

The coordinator is the facade; each part of the protocol lives in a class of its own, as
Flink splits the same work: :class:`EpochBeginner` (beginning an epoch, with the
:class:`RequestDecider`, :class:`ParentSelector` and :class:`TablePins` it asks),
:class:`TaskAcknowledgements` (attempts, acknowledgements, declines),
:class:`EpochDecisions` (completing and aborting), :class:`EpochFinisher` (what follows a
decision), :class:`PromotionRule`, :class:`FailureManager` (the failure budget),
:class:`RunIndex` (a run's epochs), :class:`PipelineRecords` (alerts, lineage origins) and
:mod:`.retention` (the cleaner).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Unpack

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_begin import BeginOptions, BeginRequest, EpochBeginner
from checkpointing.coordination.epoch_decisions import AbortListener, EpochDecisions
from checkpointing.coordination.epoch_finisher import EpochFinisher
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.failure_manager import FailureManager
from checkpointing.coordination.parent_selector import ParentSelector, RestoreMappingError
from checkpointing.coordination.pipeline_records import PipelineRecords
from checkpointing.coordination.promotion import PromotionRule
from checkpointing.coordination.run_index import RunIndex
from checkpointing.coordination.task_acknowledgements import (
    AlignmentError,
    AttemptStart,
    TaskAcknowledgements,
)
from checkpointing.errors import CheckpointError, EpochNotFound, NotFound, UnknownTask
from checkpointing.ids import validate_id
from checkpointing.protocol.acknowledgement import Acknowledgement, AckResult
from checkpointing.protocol.barrier import Barrier, TaskPlan
from checkpointing.protocol.decision import Decision
from checkpointing.protocol.epoch_metadata import AbortReason, EpochMetadata
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.listener import EpochListener, NoOpListener, SafeListener
from checkpointing.protocol.listings import FileListing
from checkpointing.protocol.operations import EngineOperation
from checkpointing.protocol.registry import MAIN, Registry
from checkpointing.protocol.state_handle import StateHandle
from checkpointing.protocol.table_inputs import TableInput, TableVersion
from checkpointing.state.task_storage import TaskStorage
from checkpointing.state.unchecked_runs import UncheckedRun
from checkpointing.storage import Storage
from checkpointing.tables.pins import TablePins
from checkpointing.views.catalog import Catalog

log = logging.getLogger("checkpointing.coordination.coordinator")

__all__ = ["AbortListener", "AlignmentError", "AttemptStart", "BeginRequest", "Coordinator",
           "RestoreMappingError"]


class Coordinator:
    """Begins, tracks and decides the epochs of one pipeline."""

    def __init__(
        self,
        storage: Storage,
        pipeline_id: str,
        config: CheckpointConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        on_abort: AbortListener | None = None,
        table_pins: TablePins | None = None,
        listener: EpochListener | None = None,
        store: EpochStore | None = None,
        failures: FailureManager | None = None,
    ):
        """Collaborators may be passed in (as Flink's coordinator is given its stores and
        failure manager): ``store`` reads and caches the pipeline's documents,
        ``failures`` keeps the failure budget (built on ``store``); by default the
        coordinator builds both from ``storage`` and ``config``."""
        self.storage = storage
        self.layout = Layout(pipeline_id)
        self.pipeline_id = pipeline_id
        self.config = config or CheckpointConfig()
        self.clock = clock
        self.store = store or EpochStore(storage, self.layout, lambda: self.clock())
        if self.store.layout != self.layout:
            raise ValueError(f"store of pipeline {self.store.pipeline_id!r} given to the "
                             f"coordinator of {pipeline_id!r}")
        self._promotion = PromotionRule(self.store, self.config)
        self._parents = ParentSelector(self.store, self.config, self._promotion)
        # The protocol's parts are the coordinator's own: callers ask the coordinator
        # (check_failures, open_epoch_for_run, ...), never reach through it to a part.
        #: the failure budget (``check_failures(lineage)`` raises once it is spent)
        self._failures = failures or FailureManager(self.store, self.config)
        #: what epochs report as they happen (metrics); never fails the protocol
        self._listener: EpochListener = SafeListener(listener) if listener else NoOpListener()
        self._finisher = EpochFinisher(self.store, self._promotion, self._parents,
                                       self._failures, self._listener)
        self._table_pins = table_pins or TablePins(storage.endpoint_url)
        self._decisions = EpochDecisions(self.store, self.config, self._finisher,
                                         self._listener, self.clock, on_abort)
        self._tasks = TaskAcknowledgements(self.store, self._decisions, self._listener,
                                           self.clock)
        # the epochs each DAG run opened
        self._runs = RunIndex(self.store, self._finisher)
        self._beginner = EpochBeginner(self.store, self.config, self._parents,
                                       self._promotion, self._decisions, self._runs,
                                       self._table_pins, self._listener, self.clock)
        # Callers outside the library reach checkpoint storage only through the coordinator:
        # the storage and key layout above are the library's (PROTOCOL 4 stays in one place).
        #: the read-only catalog: manifest, savepoints, alerts, lineages
        self.catalog = Catalog(storage, self.layout)
        #: alerts and backfill origins, recorded once
        self.records = PipelineRecords(self.store, self.config, self.clock)
        #: the S3-compatible endpoint checkpoint storage is reached at (None: AWS, files):
        #: what Spark and the table libraries are given for the tables next to it
        self.endpoint_url = storage.endpoint_url

    def task_storage(self, epoch_id: int, task_id: str, attempt: int) -> TaskStorage:
        """Attempt ``attempt`` of task ``task_id``'s view of storage (its state and
        staging areas), for the job runtime."""
        return TaskStorage(self.storage, self.layout, epoch_id, task_id, attempt)

    def unchecked_run(self, run_id: str) -> UncheckedRun:
        """The files of run ``run_id`` with checkpointing disabled (outside the protocol)."""
        return UncheckedRun(self.storage, self.pipeline_id, run_id)

    # ------------------------------------------------------------------ documents
    # The epoch documents (an EpochReader): what the read side is given.
    def registry(self) -> Registry:
        """The current registry (an empty one before the first epoch)."""
        return self.store.registry()

    def barrier(self, epoch_id: int) -> Barrier:
        """The epoch's barrier (cached: barriers are immutable)."""
        return self.store.barrier(epoch_id)

    def metadata(self, epoch_id: int) -> EpochMetadata | None:
        """The epoch's decided outcome, or None while it is pending."""
        return self.store.metadata(epoch_id)

    def decision(self, epoch_id: int, *, metadata_absent: bool = False,
                 barrier_read: bool = False) -> Decision | None:
        """How the epoch ended, read from what survives retention (PROTOCOL 6.11); None
        while it is pending. See :meth:`EpochStore.decision`."""
        return self.store.decision(epoch_id, metadata_absent=metadata_absent,
                                   barrier_read=barrier_read)

    def read_ack(self, key: str) -> Acknowledgement:
        """The acknowledgement stored at ``key``."""
        return self.store.read_ack(key)

    def epoch_ids(self) -> list[int]:
        """Ids of every epoch that has a directory in storage, ascending. A directory can
        exist without a barrier (PROTOCOL 6.11): use :meth:`barriers` to enumerate epochs."""
        return self.store.epoch_ids()

    def completed_handles(self, epoch_id: int) -> dict[str, StateHandle]:
        """Every task's state handle of a completed epoch."""
        return self.store.completed_handles(epoch_id)

    def latest_completed(self, lineage: str = MAIN) -> int | None:
        """The lineage's latest completed epoch: 1 + |open| reads, whatever the history."""
        validate_id(lineage, "lineage")
        return self.store.latest_completed(lineage)

    def next_attempt(self, epoch_id: int) -> int:
        """One more than the highest attempt of any task in the epoch: the attempt number a
        driver that resumes the epoch uses, fencing whatever ran before it."""
        return self.store.next_attempt(epoch_id)

    def barriers(self, lineage: str | None = None) -> list[Barrier]:
        """The barriers of the epochs in storage (of ``lineage``, if given), ascending by id.
        A directory without a barrier is skipped: its barrier is being written (a file
        system makes the directory first) or a late writer left it after retention
        (PROTOCOL 6.11); neither is an epoch a reader can describe yet."""
        found = (self.store.barrier_or_none(e) for e in self.store.epoch_ids())
        return [b for b in found if b is not None and lineage in (None, b.lineage)]

    def status(self, epoch_id: int) -> str:
        """``completed``, ``aborted``, ``decided`` (deleted, its outcome no longer kept),
        ``pending`` or ``unknown`` (never allocated)."""
        try:
            decision = self.decision(epoch_id)
        except EpochNotFound:
            return "unknown"
        return "pending" if decision is None else decision.status

    # ------------------------------------------------------------------ runs
    def open_epoch_for_run(self, run_id: str, lineage: str = MAIN) -> Barrier | None:
        """The undecided epoch DAG run ``run_id`` opened in ``lineage``, if any."""
        return self._runs.open_epoch_for_run(run_id, lineage)

    def epochs_of_run(self, run_id: str, lineage: str = MAIN) -> list[int]:
        """The epochs DAG run ``run_id`` opened in ``lineage``, oldest first."""
        return self._runs.epochs_of_run(run_id, lineage)

    def completed_epoch_of_run(self, run_id: str, lineage: str = MAIN) -> int | None:
        """The epoch of DAG run ``run_id`` that completed in ``lineage``, if one did."""
        return self._runs.completed_epoch_of_run(run_id, lineage)

    def check_failures(self, lineage: str = MAIN) -> None:
        """Raise :class:`FailureBudgetExhausted` once more consecutive epochs of ``lineage``
        failed than ``tolerable_failed_epochs``: what a run asks before it begins one."""
        self._failures.check(lineage)

    def failures_exhausted(self, lineage: str = MAIN) -> bool:
        """Whether :meth:`check_failures` would raise."""
        return self._failures.exhausted(lineage)

    def pin_table_inputs(self, plan: Mapping[str, TaskPlan]
                         ) -> tuple[dict[str, TaskPlan], dict[str, TableVersion]]:
        """``plan`` with its catalog-named table inputs resolved to locations, and the
        newest version of each table input, as an epoch's begin pins them (PROTOCOL 6.14);
        a table that cannot be pinned raises :class:`TableInputError`."""
        resolved = self._table_pins.resolve(plan)
        return resolved, self._table_pins.pin_all(resolved)

    def newest_table_version(self, spec: TableInput) -> TableVersion:
        """Table ``spec``'s newest version, read as an epoch's begin would pin it."""
        return self._table_pins.newest(spec)

    # ------------------------------------------------------------------ begin
    def begin(self, request: BeginRequest) -> Barrier:
        """Allocate the next epoch id and write its barrier (PROTOCOL 6.1); the request's
        fields are described on :class:`BeginRequest`."""
        return self._beginner.begin(request)

    def begin_epoch(self, plan: Mapping[str, TaskPlan], run_id: str,
                    **options: Unpack[BeginOptions]) -> Barrier:
        """:meth:`begin` a request of ``plan`` for ``run_id``, ``options`` being the
        request's other fields."""
        return self.begin(BeginRequest(plan, str(run_id), **options))

    def begin_or_join(self, plan: Mapping[str, TaskPlan], run_id: str,
                      **options: Unpack[BeginOptions]) -> Barrier:
        """The epoch ``run_id`` has open in its lineage, else a new one: what each root task
        of a DAG run calls, so that the epoch begins with the first task that needs it and
        racing roots share it (PROTOCOL 6.1, 1.10). A run whose epochs are all decided gets
        a new one: the caller decides whether the run may begin again."""
        existing = self._runs.open_epoch_for_run(run_id, options.get("lineage", MAIN))
        if existing is not None:
            return existing
        return self.begin(replace(BeginRequest(plan, str(run_id), **options), join=True))

    # ------------------------------------------------------------------ tasks
    def register_attempt(self, epoch_id: int, task_id: str, attempt: int) -> AttemptStart:
        """Fence older attempts before this one runs (PROTOCOL 6.3); see
        :meth:`TaskAcknowledgements.register_attempt`."""
        return self._tasks.register_attempt(epoch_id, task_id, attempt)

    def record_operation(self, epoch_id: int, op: EngineOperation) -> None:
        """Record the long engine action an attempt starts now (PROTOCOL 5.17)."""
        self._tasks.record_operation(epoch_id, op)

    def pin_listing(self, epoch_id: int, source: str, listed: FileListing) -> FileListing:
        """The listing of landed files the epoch reads from ``source``: the first one
        recorded in the epoch, else ``listed``; see :meth:`TaskAcknowledgements.pin_listing`."""
        return self._tasks.pin_listing(epoch_id, source, listed)

    def acknowledge(self, epoch_id: int, task_id: str, attempt: int, handle: StateHandle,
                    *, complete: bool = False) -> AckResult:
        """Record the task's state handle for the epoch; see
        :meth:`TaskAcknowledgements.acknowledge`."""
        return self._tasks.acknowledge(epoch_id, task_id, attempt, handle, complete=complete)

    def decline(self, epoch_id: int, task_id: str, attempt: int, reason: str) -> EpochMetadata:
        """A task refuses the epoch (bad data, validation): the epoch is aborted."""
        return self._tasks.decline(epoch_id, task_id, attempt, reason)

    def acknowledged_handle(self, epoch_id: int, task_id: str) -> StateHandle | None:
        """The state handle ``task_id`` acknowledged the epoch with, None while it has not."""
        return self._tasks.acknowledged_handle(epoch_id, task_id)

    def upstream_handles(self, epoch_id: int, task_id: str) -> dict[str, StateHandle]:
        """The epoch's state handles of the task's upstream tasks; :class:`AlignmentError`
        while one has not acknowledged (barrier alignment)."""
        return self._tasks.upstream_handles(epoch_id, task_id)

    def restore_handle(self, epoch_id: int, task_id: str) -> StateHandle | None:
        """The state handle ``task_id`` must restore from when running ``epoch_id``: the
        task's handle in the barrier's parent epoch or savepoint (None: start empty)."""
        barrier = self.barrier(epoch_id)
        if task_id not in barrier.plan:
            raise UnknownTask(f"task {task_id!r} is not in the plan of epoch {epoch_id}")
        if barrier.parent_savepoint:
            from checkpointing.records.savepoints import read_savepoint

            sp = read_savepoint(self.storage, self.layout, barrier.parent_savepoint)
            ack = sp.acks.get(task_id)
            return ack.state_handle if ack else None
        if barrier.parent_epoch_id is None:
            return None
        meta = self.metadata(barrier.parent_epoch_id)
        if meta is None or not meta.completed:
            raise CheckpointError(f"parent epoch {barrier.parent_epoch_id} of epoch {epoch_id} "
                                  "is not completed")
        ref = meta.acks.get(task_id)
        if ref is None:
            return None
        try:
            return self.read_ack(ref.key).state_handle
        except NotFound:
            raise CheckpointError(
                f"state of task {task_id!r} in epoch {barrier.parent_epoch_id} is gone "
                f"({self.storage.uri(ref.key)}): was it deleted by hand?") from None

    # ------------------------------------------------------------------ decisions
    def try_complete(self, epoch_id: int) -> EpochMetadata | None:
        """Complete the epoch if every planned task has acknowledged; else None. A decided
        epoch returns its decision."""
        return self._decisions.try_complete(epoch_id)

    def complete(self, epoch_id: int) -> EpochMetadata:
        """Complete the epoch; :class:`EpochIncomplete` names the tasks that have not
        acknowledged."""
        return self._decisions.complete(epoch_id)

    def missing_tasks(self, epoch_id: int) -> list[str]:
        """Planned tasks without an effective acknowledgement."""
        return self._decisions.missing_tasks(epoch_id)

    def abort(self, epoch_id: int, reason: AbortReason | str, detail: str = "", *,
              declined_by: str | None = None) -> EpochMetadata:
        """Abort the epoch unless it is already decided; return the decision. Only the
        caller whose write decides the abort notifies ``on_abort``."""
        return self._decisions.abort(epoch_id, reason, detail, declined_by=declined_by)

    def abort_run(self, run_id: str, detail: str) -> list[EpochMetadata]:
        """Abort, as ``cancelled``, every pending epoch the DAG run ``run_id`` opened."""
        return self._decisions.abort_run(run_id, detail)

    def complete_or_abort(self, epoch_id: int, reason: AbortReason | str,
                          detail: str | Callable[[list[str]], str], *,
                          declined_by: Callable[[list[str]], str | None] | None = None,
                          ) -> EpochMetadata:
        """Complete the epoch if every task acknowledged, else abort it with ``reason``;
        see :meth:`EpochDecisions.complete_or_abort`."""
        return self._decisions.complete_or_abort(epoch_id, reason, detail,
                                                 declined_by=declined_by)

    def expire(self, barrier: Barrier) -> EpochMetadata | None:
        """Decide the epoch of ``barrier`` if its deadline passed; None before it."""
        return self._decisions.expire(barrier)

    def expire_overdue(self) -> list[EpochMetadata]:
        """Decide every open epoch past its deadline; the decisions this call wrote."""
        return self._decisions.expire_overdue()

    def recover(self) -> Registry:
        """Finish decisions interrupted by a crash (PROTOCOL 6.6); the registry after."""
        return self._decisions.recover()
