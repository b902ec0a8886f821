"""The checkpoint coordinator (Flink's CheckpointCoordinator) for one pipeline.

It is stateless between calls except for caches of immutable documents (barriers and
decided ``_metadata``, kept by its :class:`EpochStore`), so any number of processes (the
Airflow scheduler, task processes, the CLI) can use it at once: every decision goes through
a conditional write in storage.

The coordinator sequences; each rule lives in a module of its own, as Flink splits the
same work: :class:`RequestDecider` (may an epoch begin), :class:`ParentSelector` (what it
restores from), :class:`PromotionRule` (backfills continuing the main line),
:class:`FailureManager` (the failure budget), :class:`EpochFinisher` (what follows a
decision), and :mod:`.retention` (the cleaner).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_finisher import EpochFinisher
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.failure_manager import FailureManager
from checkpointing.coordination.lease import runner_lost
from checkpointing.coordination.parent_selector import LATEST, ParentSelector, RestoreMappingError
from checkpointing.coordination.promotion import PromotionRule
from checkpointing.coordination.request_decider import RequestDecider
from checkpointing.coordination.staleness import StaleAlert, record_stale_alert, stale
from checkpointing.errors import (
    CheckpointError,
    EpochAlreadyDecided,
    EpochIncomplete,
    EpochNotFound,
    NotFound,
    PreconditionFailed,
    StaleAttempt,
    StorageError,
    UnknownTask,
)
from checkpointing.ids import validate_attempt, validate_epoch_id, validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.acknowledgement import Acknowledgement, AckResult, AckStatus
from checkpointing.protocol.attempts import TaskAttempts, scan_epoch_tasks, scan_task
from checkpointing.protocol.barrier import Barrier, TaskPlan, plan_table_inputs
from checkpointing.protocol.decision import Decision
from checkpointing.protocol.documents import now_iso, parse_iso, writer_identity
from checkpointing.protocol.epoch_metadata import ABORT_REASONS, AbortReason, AckRef, EpochMetadata
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.listener import EpochListener, NoOpListener, SafeListener
from checkpointing.protocol.markers import ATTEMPT_START, DECLINE, RUN_INDEX
from checkpointing.protocol.operations import OPERATION, EngineOperation
from checkpointing.protocol.registry import MAIN, OpenEpoch, Registry
from checkpointing.protocol.state_handle import StateHandle
from checkpointing.records.alerts import EpochAlert, record_alert
from checkpointing.records.backfill_lineages import (
    LineageOrigin,
    delete_origin,
    record_origin,
)
from checkpointing.state.task_storage import TaskStorage
from checkpointing.state.unchecked_runs import UncheckedRun
from checkpointing.storage import Storage
from checkpointing.tables.expectations import AwaitedVersion, awaited_versions, unchanged_inputs
from checkpointing.tables.pins import TablePins
from checkpointing.views.catalog import Catalog

log = logging.getLogger("checkpointing.coordination.coordinator")

#: Called once per aborted epoch, by the process whose write decided the abort.
AbortListener = Callable[[EpochMetadata, "Barrier | None"], None]

__all__ = ["AbortListener", "AlignmentError", "AttemptStart", "BeginRequest", "Coordinator",
           "RestoreMappingError"]


class AlignmentError(CheckpointError):
    """An upstream task has not acknowledged the epoch yet (barrier alignment)."""


@dataclass(frozen=True)
class AttemptStart:
    """Result of registering an attempt: ``existing`` is set when the task already has an
    effective acknowledgement in this epoch, in which case the attempt must not run."""

    epoch_id: int
    task_id: str
    attempt: int
    existing: Acknowledgement | None = None
    #: the operation a killed lower attempt left running, which this one may resume
    #: (PROTOCOL 5.17, 6.3); None when there is none or its record is unreadable
    resume: EngineOperation | None = None


@dataclass(frozen=True)
class BeginRequest:
    """What a begin asks for, validated on construction (see :meth:`Coordinator.begin_epoch`
    for the meaning of each field)."""

    plan: Mapping[str, TaskPlan]
    run_id: str
    lineage: str = MAIN
    data_interval: dict[str, str] | None = None
    input_range: Any = None
    parent_epoch_id: Any = LATEST
    parent_savepoint: str | None = None
    publish_on_complete: bool = True
    allow_non_restored_state: bool = False
    promote: bool = False
    owner: str | None = None
    join: bool = False
    #: table input name -> the lowest version the epoch may pin (an asset event's)
    min_table_versions: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        validate_id(self.lineage, "lineage")
        if self.promote and self.lineage == MAIN:
            raise ValueError("only a backfill lineage's epoch can be promoted to main")
        if not self.plan:
            raise ValueError("an epoch needs at least one task in its plan")
        for task, tp in self.plan.items():
            validate_id(task, "task id")
            for up in tp.upstream:
                if up not in self.plan:
                    raise ValueError(f"task {task!r} has upstream {up!r} that is not in the plan")


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
        self.on_abort = on_abort
        self.store = store or EpochStore(storage, self.layout, lambda: self.clock())
        if self.store.layout != self.layout:
            raise ValueError(f"store of pipeline {self.store.pipeline_id!r} given to the "
                             f"coordinator of {pipeline_id!r}")
        self.decider = RequestDecider(pipeline_id, self.config)
        self.promotion = PromotionRule(self.store, self.config)
        self.parents = ParentSelector(self.store, self.config, self.promotion)
        self.failures = failures or FailureManager(self.store, self.config)
        #: what epochs report as they happen (metrics); never fails the protocol
        self.listener: EpochListener = SafeListener(listener) if listener else NoOpListener()
        self.finisher = EpochFinisher(self.store, self.promotion, self.parents, self.failures,
                                      self.listener)
        self.table_pins = table_pins or TablePins(storage.endpoint_url)

    # ------------------------------------------------------------------ views
    # Callers outside the library reach checkpoint storage only through these: the
    # storage and key layout above are the library's (PROTOCOL 4 stays in one place).
    @property
    def catalog(self) -> Catalog:
        """The read-only catalog: manifest, savepoints, alerts, lineages."""
        return Catalog(self.storage, self.layout)

    @property
    def endpoint_url(self) -> str | None:
        """The S3-compatible endpoint checkpoint storage is reached at (None: AWS, files):
        what Spark and the table libraries are given for the tables next to it."""
        return self.storage.endpoint_url

    @property
    def storage_locations(self) -> tuple[str, ...]:
        """Where checkpoint storage lives, as messages may spell it (its root URI, and a
        local root's path): what an answer to a user must not show."""
        root = getattr(self.storage, "root", None)  # a LocalStorage's directory
        return (self.storage.uri(""), *((str(root),) if root is not None else ()))

    def task_storage(self, epoch_id: int, task_id: str, attempt: int) -> TaskStorage:
        """Attempt ``attempt`` of task ``task_id``'s view of storage (its state and
        staging areas), for the job runtime."""
        return TaskStorage(self.storage, self.layout, epoch_id, task_id, attempt)

    def unchecked_run(self, run_id: str) -> UncheckedRun:
        """The files of run ``run_id`` with checkpointing disabled (outside the protocol)."""
        return UncheckedRun(self.storage, self.pipeline_id, run_id)

    def record_alert(self, alert: EpochAlert) -> bool:
        """Write an aborted epoch's alert record; True when this call wrote it (deliver
        the alert), False when another process had (stay quiet)."""
        return record_alert(self.storage, self.layout, alert)

    def stale_alert(self, lineage: str = MAIN) -> StaleAlert | None:
        """The staleness alert of ``lineage`` when its last completed epoch is older than
        ``config.max_epoch_age_seconds`` and this call recorded it first (deliver it); None
        otherwise: not stale, no age configured, no completed epoch yet, or another
        process already alerted for this stale period (PROTOCOL 5.18)."""
        if self.config.max_epoch_age_seconds is None:
            return None
        latest = self.latest_completed(lineage)
        meta = self.metadata(latest) if latest is not None else None
        if latest is None or meta is None or not meta.decided_at:
            return None
        alert = stale(self.pipeline_id, lineage, latest, meta.decided_at,
                      parse_iso(meta.decided_at), self.clock(),
                      self.config.max_epoch_age_seconds)
        if alert is None or not record_stale_alert(self.storage, self.layout, alert):
            return None
        return alert

    def record_origin(self, origin: LineageOrigin) -> None:
        """Record where a backfill lineage starts (PROTOCOL 5.9)."""
        record_origin(self.storage, self.layout, origin)

    def delete_origin(self, lineage: str) -> None:
        """Forget a backfill lineage that never began an epoch."""
        delete_origin(self.storage, self.layout, lineage)

    # ------------------------------------------------------------------ documents
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

    # ------------------------------------------------------------------ begin
    def begin_epoch(
        self,
        plan: Mapping[str, TaskPlan],
        run_id: str,
        *,
        lineage: str = MAIN,
        data_interval: dict[str, str] | None = None,
        input_range: Any = None,
        parent_epoch_id: int | None | object = LATEST,
        parent_savepoint: str | None = None,
        publish_on_complete: bool = True,
        allow_non_restored_state: bool = False,
        promote: bool = False,
        owner: str | None = None,
        join: bool = False,
        min_table_versions: Mapping[str, int] | None = None,
    ) -> Barrier:
        """Allocate the next epoch id and write its barrier (PROTOCOL 6.1).

        The parent defaults to the lineage's latest completed epoch. An explicit parent
        epoch or savepoint is checked against the plan: state of tasks the plan lacks is an
        error unless ``allow_non_restored_state`` (Flink's flag of the same name).
        ``promote``: this backfill epoch continues the main line when it completes, if its
        input reaches main's (PROTOCOL 6.5, 1.4). ``owner``: the DAG opening the epoch; the
        first begin records it, and a begin of another owner is refused (1.7).
        ``join``: when the run already has an epoch open in the lineage, return it instead
        of allocating another, decided inside the allocation's compare-and-swap, so that
        the run's tasks that each begin its epoch (its root tasks, racing) share one
        (PROTOCOL 6.1, 1.10). See :meth:`begin_or_join`.
        ``min_table_versions``: per table input, the lowest version the epoch may read up
        to (the version of the asset event that triggered the run): a table found older is
        refused (PROTOCOL 6.14).
        """
        req = BeginRequest(plan, str(run_id), lineage, data_interval, input_range,
                           parent_epoch_id, parent_savepoint, publish_on_complete,
                           allow_non_restored_state, promote, owner, join, min_table_versions)
        # The order is the protocol's (6.1); each step may refuse, and none before the
        # allocation writes anything but decisions of epochs already due.
        req = self._resolve_explicit_parent(req)
        reg = self._settle_open_epochs(req)
        parent, fallback = req.parent_epoch_id, list[JsonObject]()
        if parent is LATEST:
            # Chosen and verified before an id is allocated: a refusal here (malformed
            # metadata) must not leave a burned id behind to block the next try.
            parent, fallback = self.parents.choose_latest(reg, req.lineage, req.plan,
                                                          req.allow_non_restored_state)
        # Pinned before an id is allocated, as the parent: an unreadable upstream table
        # refuses the begin without leaving a burned id.
        versions = self.table_pins.pin_all(req.plan, req.min_table_versions)
        burned = self._own_burned_entry(reg, req.run_id, req.lineage)
        entry, joined = (burned, False) if burned is not None else self._allocate(req)
        if burned is not None:
            # This run's previous try allocated the id and died before the barrier (or,
            # joining, another task of the run is writing it): the id is this run's, so its
            # barrier is written now rather than the id left to block until expiry.
            log.log(logging.INFO if req.join else logging.WARNING,
                    "pipeline %s: run %s writes the barrier of epoch %d, allocated by %s",
                    self.pipeline_id, req.run_id, entry.epoch_id,
                    "another task of the run" if req.join else "its previous try")
        if joined:
            barrier = self.store.barrier_or_none(entry.epoch_id)
            if barrier is not None:
                return barrier
        barrier = Barrier(
            pipeline_id=self.pipeline_id, epoch_id=entry.epoch_id, run_id=req.run_id,
            lineage=req.lineage, plan=dict(req.plan), created_at=entry.created_at,
            deadline=entry.deadline, config=self.config, mode=self.config.mode,
            data_interval=req.data_interval, input_range=req.input_range,
            parent_epoch_id=parent,
            parent_savepoint=req.parent_savepoint, publish_on_complete=req.publish_on_complete,
            writer=writer_identity(), restore_fallback=tuple(fallback), promote=req.promote,
            table_versions=versions,
        )
        # A joining begin shares its id with the run's other tasks: whichever writes the
        # barrier first wins, the allocator included (a joiner can write it before it).
        return self._write_barrier(barrier, reclaimed=burned is not None or req.join)

    def begin_or_join(self, plan: Mapping[str, TaskPlan], run_id: str, *,
                      lineage: str = MAIN, **begin: Any) -> Barrier:
        """The epoch ``run_id`` has open in ``lineage``, else a new one: what each root task
        of a DAG run calls, so that the epoch begins with the first task that needs it and
        racing roots share it (PROTOCOL 6.1, 1.10). Other arguments as :meth:`begin_epoch`.
        A run whose epochs are all decided gets a new one: the caller decides whether the
        run may begin again."""
        existing = self.open_epoch_for_run(run_id, lineage)
        if existing is not None:
            return existing
        return self.begin_epoch(plan, run_id, lineage=lineage, join=True, **begin)

    def _resolve_explicit_parent(self, req: BeginRequest) -> BeginRequest:
        """A backfill lineage without completed epochs starts from its origin; an explicit
        parent epoch or savepoint is checked against the plan."""
        parent, savepoint = req.parent_epoch_id, req.parent_savepoint
        if parent is LATEST and savepoint is None and req.lineage != MAIN:
            parent, savepoint = self.parents.origin_parent(req.lineage)
        parent = self.parents.check_explicit(req.plan, parent, savepoint,
                                             req.allow_non_restored_state)
        return replace(req, parent_epoch_id=parent, parent_savepoint=savepoint)

    def _settle_open_epochs(self, req: BeginRequest) -> Registry:
        """Before allocating: finish interrupted decisions, check the owner (before anything
        is expired or written), expire overdue epochs, wait for a promoting backfill (main
        only), and abort lost runners when the lineage is full. Returns the registry after."""
        reg = self.recover()
        self.decider.check_owner(reg, req.owner)
        if self.expire_overdue():
            reg = self.registry()
        if req.lineage == MAIN:
            self.promotion.check_main_may_begin(reg)
        full = self.decider.full(reg, req.lineage, req.run_id)
        if full and self.expire_lost_runners(full):
            reg = self.registry()
        return reg

    def _allocate(self, req: BeginRequest) -> tuple[OpenEpoch, bool]:
        """Allocate the next id in the registry, admitted by the request decider inside the
        same compare-and-swap (two racing begins cannot both pass); (entry, joined): a
        joining begin gets the run's open entry instead, when there is one."""
        now = self.clock()
        created, deadline = now_iso(now), now_iso(now + self.config.timeout_seconds)

        def allocate(reg: Registry) -> tuple[Registry | None, tuple[OpenEpoch, bool]]:
            if req.join:
                own = [o for o in reg.open
                       if o.run_id == req.run_id and o.lineage == req.lineage]
                if own:
                    return None, (own[-1], True)
            self.decider.check_owner(reg, req.owner)
            self.decider.check_capacity(reg, req.lineage, now)
            entry = OpenEpoch(reg.last_epoch_id + 1, req.lineage, created, deadline,
                              req.run_id)
            reg = replace(reg, last_epoch_id=entry.epoch_id, open=(*reg.open, entry),
                          owner=reg.owner or req.owner)
            st = reg.lineage(req.lineage)
            return (reg.with_lineage(req.lineage, replace(st, last_started_at=created)),
                    (entry, False))

        return self.store.update_registry(allocate)

    def _write_barrier(self, barrier: Barrier, reclaimed: bool) -> Barrier:
        try:
            self.store.create_barrier(barrier)
        except PreconditionFailed:
            if reclaimed:  # a concurrent try (or task) of the same run wrote it first
                theirs = self.store.reread_barrier(barrier.epoch_id)
                if (theirs.run_id, theirs.lineage) == (barrier.run_id, barrier.lineage):
                    return theirs
            raise StorageError(
                f"epoch id {barrier.epoch_id} was just allocated but its barrier exists: the "
                "registry is behind the stored epochs; refusing to reuse the id") from None
        self._index_run(barrier)
        self.listener.epoch_began(barrier)
        log.info("pipeline %s: began epoch %d (run %s, lineage %s, parent %s)",
                 self.pipeline_id, barrier.epoch_id, barrier.run_id, barrier.lineage,
                 barrier.parent_epoch_id)
        return barrier

    def _own_burned_entry(self, reg: Registry, run_id: str, lineage: str) -> OpenEpoch | None:
        """An open entry allocated by ``run_id`` that has neither barrier nor decision."""
        for entry in reg.open:
            if entry.run_id != run_id or entry.lineage != lineage:
                continue
            if self.store.barrier_or_none(entry.epoch_id) is None and \
                    self.metadata(entry.epoch_id) is None:
                return entry
        return None

    def _index_run(self, barrier: Barrier) -> None:
        """Record that the barrier's run opened this epoch (PROTOCOL 5.14); an index entry
        lost to a crash only costs a later lookup of the run, never correctness."""
        key = self.layout.run_index_entry(barrier.lineage, barrier.run_id, barrier.epoch_id)
        body = {"run_id": barrier.run_id, "epoch_id": barrier.epoch_id,
                "lineage": barrier.lineage}
        try:
            self.storage.create(key, RUN_INDEX.encode(body))
        except PreconditionFailed:
            pass
        except StorageError as exc:
            log.warning("pipeline %s: run index of epoch %d not written: %s",
                        self.pipeline_id, barrier.epoch_id, exc)

    def epochs_of_run(self, run_id: str, lineage: str = MAIN) -> list[int]:
        """The epochs ``run_id`` opened in ``lineage``, ascending (one listing)."""
        prefix = self.layout.run_index_prefix(lineage, str(run_id))
        ids = [o.key[len(prefix):] for o in self.storage.list(prefix)]
        return sorted(int(i) for i in ids if len(i) == 10 and i.isdigit())

    def completed_epoch_of_run(self, run_id: str, lineage: str = MAIN) -> int | None:
        """The epoch ``run_id`` completed, if it did (its newest epoch, when completed)."""
        ids = self.epochs_of_run(run_id, lineage)
        if not ids:
            return None
        meta = self.metadata(ids[-1])
        if meta is None or not meta.completed:
            return None
        self.finisher.finish_if_interrupted(meta)  # completed but never published: publish now
        return ids[-1]

    def next_attempt(self, epoch_id: int) -> int:
        """One more than the highest attempt of any task in the epoch: the attempt number a
        driver that resumes the epoch uses, fencing whatever ran before it."""
        return self.store.next_attempt(epoch_id)

    # ------------------------------------------------------------------ tasks
    def _check_task(self, epoch_id: int, task_id: str, attempt: int) -> bool:
        """Validate the task against the epoch's plan; True when the barrier was read from
        storage by this call (not from the cache), which then need not be checked again."""
        validate_id(task_id, "task id")
        validate_attempt(attempt)
        fresh = not self.store.barrier_cached(epoch_id)
        try:
            barrier = self.barrier(epoch_id)
        except EpochNotFound:  # deleted by retention once decided: say so, write nothing
            self._refuse_if_decided(epoch_id, task_id)
            raise
        if task_id not in barrier.plan:
            raise UnknownTask(f"task {task_id!r} is not in the plan of epoch {epoch_id} "
                              f"(plan: {sorted(barrier.plan)})")
        return fresh

    def _refuse_if_decided(self, epoch_id: int, task_id: str,
                           barrier_read: bool = False) -> None:
        """Refuse a write of ``task_id`` into a decided epoch, even one whose files
        retention deleted (a barrier cached here earlier is checked afresh)."""
        decision = self.decision(epoch_id, barrier_read=barrier_read)
        if decision is not None:
            raise EpochAlreadyDecided(f"{decision.describe()}; task {task_id!r} cannot "
                                      "change it")

    @staticmethod
    def _refuse_if_stale(ta: TaskAttempts, epoch_id: int, attempt: int) -> None:
        if ta.highest > attempt:
            raise StaleAttempt(
                f"attempt {attempt} of task {ta.task_id!r} in epoch {epoch_id} is stale: "
                f"attempt {ta.highest} exists")

    def register_attempt(self, epoch_id: int, task_id: str, attempt: int) -> AttemptStart:
        """Fence older attempts before this one runs (PROTOCOL 6.3).

        When the task already has an effective acknowledgement, nothing is registered and
        ``existing`` holds it: the caller must not run the task again.
        """
        fresh = self._check_task(epoch_id, task_id, attempt)
        ta = scan_task(self.storage, self.layout, epoch_id, task_id)
        eff = ta.effective_ack
        if eff is not None:
            return AttemptStart(epoch_id, task_id, attempt, self.read_ack(eff[1].key))
        self._refuse_if_decided(epoch_id, task_id, barrier_read=fresh)
        self._refuse_if_stale(ta, epoch_id, attempt)
        # Attempt 1 fences nothing (no lower attempt exists), so it writes no marker:
        # one request less on every task's path.
        if attempt > 1 and attempt not in ta.starts:
            body = {"task_id": task_id, "attempt": attempt,
                    "started_at": now_iso(self.clock()), "writer": writer_identity()}
            try:
                self.storage.create(self.layout.attempt_object(epoch_id, task_id, attempt,
                                                               "start"),
                                    ATTEMPT_START.encode(body))
            except PreconditionFailed:
                pass  # the same attempt registered twice: idempotent
        return AttemptStart(epoch_id, task_id, attempt,
                            resume=self._resumable(ta.resumable_operation(attempt)))

    def _resumable(self, info: Any) -> EngineOperation | None:
        """The operation record at ``info`` (a hint: unreadable means none, 5.17)."""
        if info is None:
            return None
        try:
            return OPERATION.decode(self.storage.read(info.key)[0], info.key)
        except (CheckpointError, OSError) as exc:
            log.warning("pipeline %s: operation record %s ignored: %s", self.pipeline_id,
                        info.key, exc)
            return None

    def record_operation(self, epoch_id: int, op: EngineOperation) -> None:
        """Record the long engine action ``op.attempt`` starts now (PROTOCOL 5.17), for its
        next attempt to resume should this one be killed. A plain write: a hint. Refused
        in a decided epoch (6.11), whose files retention may have deleted: the record must
        not bring its directory back."""
        self._refuse_if_decided(epoch_id, op.task_id)
        key = self.layout.attempt_object(epoch_id, op.task_id, op.attempt, "operation")
        self.storage.write(key, OPERATION.encode({**op.to_json(),
                                                  "writer": writer_identity()}))

    def acknowledge(self, epoch_id: int, task_id: str, attempt: int, handle: StateHandle,
                    *, complete: bool = False) -> AckResult:
        """Record the task's state handle for the epoch (Flink's
        ``PendingCheckpoint.acknowledgeTask``): SUCCESS, or DUPLICATE for an attempt that
        had acknowledged already (the first acknowledgement stays). Refused for a task not
        in the plan, a decided epoch, or a stale attempt.

        ``complete``: when this acknowledgement is the epoch's last, complete the epoch now
        (PROTOCOL 6.5, 1.10), so that its outputs publish without waiting for the commit
        step, as Flink's coordinator completes a checkpoint on its last acknowledgement.
        Only a leaf task's acknowledgement can be the last; a completion that fails is
        left to whoever completes next (the commit step, the watchdog, the next begin)
        and never fails the acknowledgement.
        """
        epoch_id = validate_epoch_id(epoch_id)
        fresh = self._check_task(epoch_id, task_id, attempt)
        if (handle.task_id, handle.epoch_id, handle.attempt) != (task_id, epoch_id, attempt):
            raise ValueError(
                f"state handle is for task {handle.task_id!r} epoch {handle.epoch_id} attempt "
                f"{handle.attempt}, not task {task_id!r} epoch {epoch_id} attempt {attempt}")
        ta = scan_task(self.storage, self.layout, epoch_id, task_id)
        eff = ta.effective_ack
        if eff is not None and eff[0] == attempt:
            result = AckResult(AckStatus.DUPLICATE, self.read_ack(eff[1].key))
        else:
            try:
                self._refuse_if_stale(ta, epoch_id, attempt)
                self._refuse_if_decided(epoch_id, task_id, barrier_read=fresh)
            except (StaleAttempt, EpochAlreadyDecided) as exc:
                self.listener.ack_refused(epoch_id, task_id, str(exc))
                raise
            ack = Acknowledgement(task_id, attempt, now_iso(self.clock()), handle,
                                  writer_identity())
            key = self.layout.attempt_object(epoch_id, task_id, attempt, "ack")
            try:
                self.storage.create(key, ack.to_bytes())
                result = AckResult(AckStatus.SUCCESS, ack)
                self.listener.task_acknowledged(self.barrier(epoch_id), ack)
            except PreconditionFailed:  # the same attempt acked concurrently: first stays
                result = AckResult(AckStatus.DUPLICATE, self.read_ack(key))
        if complete:
            result = replace(result, completed=self._complete_if_last(epoch_id, task_id))
        return result

    def _complete_if_last(self, epoch_id: int, task_id: str) -> EpochMetadata | None:
        """The epoch's decision if ``task_id``'s acknowledgement was its last (it completes
        it); None when a task is still to acknowledge or the completion failed."""
        plan = self.barrier(epoch_id).plan
        if any(task_id in tp.upstream for tp in plan.values()):
            return None  # a task downstream has yet to acknowledge: this one is not last
        try:
            meta = self.try_complete(epoch_id)
        except Exception as exc:  # noqa: BLE001 - whoever completes next finishes it
            log.warning("task %s: epoch %d not completed on its acknowledgement (%s); the "
                        "commit step completes it", task_id, epoch_id, exc)
            return None
        if meta is not None and meta.completed:
            log.info("task %s acknowledged last: epoch %d completed", task_id, epoch_id)
        return meta

    def decline(self, epoch_id: int, task_id: str, attempt: int, reason: str) -> EpochMetadata:
        """A task refuses the epoch (bad data, validation): the epoch is aborted."""
        epoch_id = validate_epoch_id(epoch_id)
        fresh = self._check_task(epoch_id, task_id, attempt)
        self._refuse_if_decided(epoch_id, task_id, barrier_read=fresh)
        ta = scan_task(self.storage, self.layout, epoch_id, task_id)
        self._refuse_if_stale(ta, epoch_id, attempt)
        body = {"task_id": task_id, "attempt": attempt, "reason": reason,
                "declined_at": now_iso(self.clock()), "writer": writer_identity()}
        try:
            self.storage.create(self.layout.attempt_object(epoch_id, task_id, attempt, "decline"),
                                DECLINE.encode(body))
        except PreconditionFailed:
            pass
        return self.abort(epoch_id, AbortReason.DECLINED, f"task {task_id} declined: {reason}",
                          declined_by=task_id)

    def acknowledged_handle(self, epoch_id: int, task_id: str) -> StateHandle | None:
        """The state handle task ``task_id`` acknowledged epoch ``epoch_id`` with (its
        effective acknowledgement's), None while it has not."""
        eff = scan_task(self.storage, self.layout, validate_epoch_id(epoch_id),
                        task_id).effective_ack
        return None if eff is None else self.read_ack(eff[1].key).state_handle

    def upstream_handles(self, epoch_id: int, task_id: str) -> dict[str, StateHandle]:
        """The current epoch's state handles of the task's upstream tasks.

        Raises :class:`AlignmentError` naming any upstream task without an effective
        acknowledgement: a task never snapshots epoch N before its inputs of N exist.
        """
        barrier = self.barrier(epoch_id)
        if task_id not in barrier.plan:
            raise UnknownTask(f"task {task_id!r} is not in the plan of epoch {epoch_id}")
        out, missing = {}, []
        for up in barrier.plan[task_id].upstream:
            eff = scan_task(self.storage, self.layout, epoch_id, up).effective_ack
            if eff is None:
                missing.append(up)
            else:
                out[up] = self.read_ack(eff[1].key).state_handle
        if missing:
            raise AlignmentError(
                f"task {task_id!r} cannot snapshot epoch {epoch_id}: upstream task(s) "
                f"{missing} have not acknowledged it")
        return out

    # ------------------------------------------------------------------ decisions
    def try_complete(self, epoch_id: int) -> EpochMetadata | None:
        """Complete the epoch if every planned task has acknowledged; else None.

        If the epoch is already decided, returns the decision (completed or aborted).
        """
        epoch_id = validate_epoch_id(epoch_id)
        existing = self.store.decided_metadata(epoch_id)
        if existing is not None:
            self.finisher.finish_if_interrupted(existing)
            return existing
        barrier = self.barrier(epoch_id)
        tasks = scan_epoch_tasks(self.storage, self.layout, epoch_id)
        acks: dict[str, AckRef] = {}
        for task in barrier.plan:
            eff = tasks.get(task, TaskAttempts(task)).effective_ack
            if eff is None:
                return None
            attempt, info = eff
            acks[task] = AckRef(attempt, info.key, now_iso(info.last_modified))
        meta = EpochMetadata(epoch_id, barrier.lineage, "completed", now_iso(self.clock()),
                             acks=acks, writer=writer_identity())
        last = self._last_completed_at(barrier.lineage)
        meta, ours = self.store.write_decision(meta)
        if ours:
            log.info("pipeline %s: completed epoch %d", self.pipeline_id, epoch_id)
            self.finisher.finish(meta, barrier)
            self._report_decision(meta, barrier, last)
        return meta

    def _last_completed_at(self, lineage: str) -> str | None:
        """When the lineage's latest completed epoch was decided (for the listener's age
        figure); read only when a listener is attached."""
        if not self.listener.reports:
            return None
        try:  # a figure for the listener: never a reason for the decision to fail
            latest = self.registry().lineage(lineage).latest_completed
            meta = self.metadata(latest) if latest else None
        except CheckpointError:
            return None
        return meta.decided_at if meta else None

    def _report_decision(self, meta: EpochMetadata, barrier: Barrier | None,
                         last_completed_at: str | None) -> None:
        if not self.listener.reports:
            return  # no listener: not even the acknowledgements are read for it
        handles = {}
        for task, ref in (meta.acks or {}).items():
            try:
                handles[task] = self.read_ack(ref.key).state_handle
            except CheckpointError:
                continue
        self.listener.epoch_decided(meta, barrier, handles, last_completed_at)

    def complete(self, epoch_id: int) -> EpochMetadata:
        """Complete the epoch (exactly one caller's write wins; all observe the winner).

        Raises :class:`EpochIncomplete` naming the tasks that have not acknowledged.
        """
        meta = self.try_complete(epoch_id)
        if meta is None:
            missing = self.missing_tasks(epoch_id)
            raise EpochIncomplete(
                f"epoch {epoch_id} cannot complete: task(s) {missing} have not acknowledged")
        return meta

    def missing_tasks(self, epoch_id: int) -> list[str]:
        """Planned tasks without an effective acknowledgement."""
        barrier = self.barrier(epoch_id)
        tasks = scan_epoch_tasks(self.storage, self.layout, epoch_id)
        return sorted(t for t in barrier.plan
                      if tasks.get(t, TaskAttempts(t)).effective_ack is None)

    def abort(self, epoch_id: int, reason: AbortReason | str, detail: str = "", *,
              declined_by: str | None = None) -> EpochMetadata:
        """Abort the epoch unless it is already decided; return the decision.

        Only the caller whose write decides the abort notifies ``on_abort``, so an alert
        fires once however many processes race to abort.
        """
        return self._abort(epoch_id, reason, detail, declined_by)[0]

    def abort_run(self, run_id: str, detail: str) -> list[EpochMetadata]:
        """Abort, as ``cancelled``, every pending epoch that the DAG run ``run_id`` opened, in
        any lineage: the run ended (an operator marked it failed or successful, Airflow's
        ``dagrun_timeout``) and its tasks will not acknowledge. Flink cancels a job's
        pending checkpoints the same way when the job is cancelled. Without this the epoch
        would hold its lineage's slot until its timeout, refusing the next run's begin.
        The decisions this call made, in id order (an epoch decided meanwhile is left)."""
        run_id = str(run_id)
        decided = []
        for entry in sorted(self.registry().open, key=lambda o: o.epoch_id):
            if entry.run_id != run_id:
                continue
            meta, ours = self._abort(entry.epoch_id, AbortReason.CANCELLED, detail, None)
            if ours:
                decided.append(meta)
        return decided

    def complete_or_abort(self, epoch_id: int, reason: AbortReason | str,
                          detail: str | Callable[[list[str]], str], *,
                          declined_by: Callable[[list[str]], str | None] | None = None,
                          ) -> EpochMetadata:
        """The one way an epoch's end is decided by whoever ends it (the commit step, the
        watchdog, a begin expiring overdue epochs): complete it if every task acknowledged,
        else abort it with ``reason``; ``detail`` and ``declined_by`` may be functions of
        the tasks that have not acknowledged. An epoch already decided keeps its
        decision. (A task's last acknowledgement completes it too: :meth:`acknowledge`.)"""
        meta = self.try_complete(epoch_id)
        if meta is not None:
            return meta
        missing = self.missing_tasks(epoch_id)
        return self.abort(epoch_id, reason, detail(missing) if callable(detail) else detail,
                          declined_by=declined_by(missing) if declined_by else None)

    def expire(self, barrier: Barrier) -> EpochMetadata | None:
        """Decide the epoch of ``barrier`` if its deadline passed (Flink's checkpoint
        canceller): completed when every task acknowledged (whoever should have completed
        it died), else aborted with reason ``timeout``. None, touching nothing, before its
        deadline (PROTOCOL 6.5)."""
        if parse_iso(barrier.deadline) > self.clock():
            return None
        return self.complete_or_abort(
            barrier.epoch_id, AbortReason.TIMEOUT,
            f"not completed within {self.config.timeout_seconds:g}s of its barrier "
            f"(deadline {barrier.deadline})")

    def _abort(self, epoch_id: int, reason: AbortReason | str, detail: str,
               declined_by: str | None) -> tuple[EpochMetadata, bool]:
        epoch_id = validate_epoch_id(epoch_id)
        if reason not in ABORT_REASONS:
            raise ValueError(f"abort reason must be one of {ABORT_REASONS}, not {reason!r}")
        reason = AbortReason(reason)
        existing = self.store.decided_metadata(epoch_id)
        if existing is not None:
            return existing, False
        barrier = self.store.barrier_or_none(epoch_id)
        missing = self.missing_tasks(epoch_id) if barrier else []
        lineage = barrier.lineage if barrier else self._open_lineage(epoch_id)
        meta = EpochMetadata(epoch_id, lineage, "aborted", now_iso(self.clock()),
                             reason=reason, detail=detail.replace("\n", " ")[:500],
                             missing_tasks=tuple(missing), declined_by=declined_by,
                             writer=writer_identity())
        last = self._last_completed_at(lineage)
        meta, ours = self.store.write_decision(meta)
        if ours:
            log.warning("pipeline %s: aborted epoch %d (%s): %s; missing tasks: %s",
                        self.pipeline_id, epoch_id, reason, detail, missing or "none")
            self.finisher.finish(meta, barrier)
            self._report_decision(meta, barrier, last)
            if self.on_abort is not None:
                try:
                    self.on_abort(meta, barrier)
                except Exception:  # an alert channel failing must not undo the abort
                    log.exception("abort listener failed for epoch %d", epoch_id)
        return meta, ours

    def _open_lineage(self, epoch_id: int) -> str:
        entry = self.registry().open_entry(epoch_id)
        return entry.lineage if entry else MAIN

    def expire_overdue(self) -> list[EpochMetadata]:
        """Decide every open epoch past its deadline (Flink's checkpoint canceller).

        A fully acknowledged overdue epoch is completed (its coordinator died before
        deciding); any other is aborted with reason ``timeout``, naming the missing tasks.
        Returns the decisions this call wrote.
        """
        now = self.clock()
        decided = []
        for entry in self.registry().open:
            if parse_iso(entry.deadline) > now or self.metadata(entry.epoch_id) is not None:
                continue
            try:
                self.barrier(entry.epoch_id)
                meta = self.try_complete(entry.epoch_id)
            except EpochNotFound:
                meta = None
            if meta is None:
                meta, ours = self._abort(entry.epoch_id, AbortReason.TIMEOUT,
                                         f"not completed within "
                                         f"{self.config.timeout_seconds:g}s "
                                         f"(deadline {entry.deadline})", None)
                if ours:
                    decided.append(meta)
            elif meta.completed:
                decided.append(meta)
        return decided

    def expire_lost_runners(self, entries: list[OpenEpoch]) -> list[EpochMetadata]:
        """Abort, as ``runner_lost``, every pending epoch among ``entries`` whose driver is
        known gone: its lease expired, or its holder was a process of this host that is
        dead (PROTOCOL 6.1). Epochs without a lease are left alone."""
        decided = []
        for entry in entries:
            if self.metadata(entry.epoch_id) is not None:
                continue
            why = runner_lost(self.store, entry.epoch_id, self.config.lease_seconds)
            if why is None:
                continue
            meta, ours = self._abort(entry.epoch_id, AbortReason.RUNNER_LOST, why, None)
            if ours:
                decided.append(meta)
        return decided

    def recover(self) -> Registry:
        """Finish decisions interrupted by a crash: publish and update the registry for
        every open epoch that already has ``_metadata`` (PROTOCOL 6.6)."""
        reg = self.registry()
        finished = False
        for entry in reg.open:
            meta = self.metadata(entry.epoch_id)
            if meta is None:
                continue
            self.finisher.finish(meta, self.store.barrier_or_none(entry.epoch_id))
            finished = True
        return self.registry() if finished else reg

    def open_epoch_for_run(self, run_id: str, lineage: str = MAIN) -> Barrier | None:
        """The undecided epoch a DAG run already opened, if any (so that a cleared or
        retried begin step reuses it instead of opening a second epoch)."""
        for entry in self.registry().open:
            if entry.lineage != lineage or self.metadata(entry.epoch_id) is not None:
                continue
            try:
                barrier = self.barrier(entry.epoch_id)
            except EpochNotFound:
                continue
            if barrier.run_id == run_id:
                return barrier
        return None

    # ------------------------------------------------------------------ lookups
    def latest_completed(self, lineage: str = MAIN) -> int | None:
        """The lineage's latest completed epoch: 1 + |open| reads, whatever the history."""
        validate_id(lineage, "lineage")
        return self.parents.latest(lineage)

    def awaited_table_versions(self, plan: Mapping[str, TaskPlan],
                               lineage: str = MAIN) -> list[AwaitedVersion]:
        """What an epoch of ``plan`` beginning now in ``lineage`` expects of its table
        inputs (PROTOCOL 6.14, 1.14): for each declared with ``expect_new_version``, a
        version newer than the latest completed epoch pinned. Main only: a backfill's epochs
        have no data interval on a table to expect anything of."""
        validate_id(lineage, "lineage")
        if lineage != MAIN or not any(s.expect_new_version for s in
                                      plan_table_inputs(dict(plan)).values()):
            return []
        last = self.parents.latest(lineage)
        parent = self.store.barrier_or_none(last) if last is not None else None
        return awaited_versions(plan, parent.table_versions) if parent is not None else []

    def unchanged_table_inputs(self, epoch_id: int, task_id: str) -> list[str]:
        """One line per table input of ``task_id`` expecting a new version that the epoch's
        barrier pinned no newer than its parent epoch's (the task declines the epoch);
        empty when every expectation is met, or outside main, or without a parent epoch."""
        barrier = self.barrier(epoch_id)
        if barrier.lineage != MAIN or barrier.parent_epoch_id is None:
            return []
        parent = self.store.barrier_or_none(barrier.parent_epoch_id)
        if parent is None:
            return []
        return unchanged_inputs(barrier.plan, task_id, barrier.table_versions,
                                parent.table_versions)

    def completed_handles(self, epoch_id: int) -> dict[str, StateHandle]:
        """Every task's state handle of a completed epoch."""
        return self.store.completed_handles(epoch_id)

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

    def epoch_ids(self) -> list[int]:
        """Ids of every epoch that has a directory in storage, ascending. A directory can
        exist without a barrier (PROTOCOL 6.11): use :meth:`barriers` to enumerate epochs."""
        return self.store.epoch_ids()

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

    def check_failure_budget(self, lineage: str = MAIN) -> None:
        """Raise :class:`FailureBudgetExhausted` when more consecutive epochs of the lineage
        failed than ``tolerable_failed_epochs`` (PROTOCOL 6.1): the caller fails its run."""
        self.failures.check(lineage)

    def failure_budget_exhausted(self, lineage: str = MAIN) -> bool:
        """True when more consecutive epochs failed than ``tolerable_failed_epochs``."""
        return self.failures.exhausted(lineage)
