"""The checkpoint coordinator (Flink's CheckpointCoordinator) for one pipeline.

It is stateless between calls except for caches of immutable documents (barriers and
decided ``_metadata``), so any number of processes (the Airflow scheduler, task processes,
the CLI) can use it at once: every decision goes through a conditional write in storage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .acknowledgement import Acknowledgement
from .attempts import TaskAttempts, scan_epoch_tasks, scan_task
from .barrier import Barrier, TaskPlan
from .cas import cas_update
from .config import CheckpointConfig
from .decision import Decision
from .documents import now_iso, parse_iso, writer_identity
from .epoch_metadata import ABORT_REASONS, AckRef, EpochMetadata, counts_as_failure
from .errors import (
    CheckpointError,
    EpochAlreadyDecided,
    EpochIncomplete,
    EpochNotFound,
    FailureBudgetExhausted,
    MalformedDocument,
    MinPauseNotElapsed,
    NotFound,
    PipelineOwnedElsewhere,
    PreconditionFailed,
    PromotingBackfillRunning,
    StaleAttempt,
    StorageError,
    TooManyConcurrentEpochs,
    UnknownTask,
)
from .history import read_failure, record_failure
from .ids import validate_attempt, validate_epoch_id, validate_id
from .layout import Layout
from .lineages import (
    MAIN,
    Promotion,
    list_origins,
    read_origin,
    read_promotion,
    record_promotion,
)
from .markers import ATTEMPT_START, DECLINE, RUN_INDEX
from .publish import publish
from .registry import LineageState, OpenEpoch, Registry
from .state_handle import OutputRef, StateHandle
from .storage import Storage
from .tables import commit_tables

log = logging.getLogger("checkpointing.coordinator")

#: Called once per aborted epoch, by the process whose write decided the abort.
AbortListener = Callable[[EpochMetadata, "Barrier | None"], None]

_LATEST = object()  # sentinel: restore from the lineage's latest completed epoch


class AlignmentError(CheckpointError):
    """An upstream task has not acknowledged the epoch yet (barrier alignment)."""


class RestoreMappingError(CheckpointError):
    """The restore source holds state for tasks that the new plan does not have."""


@dataclass(frozen=True)
class AttemptStart:
    """Result of registering an attempt: ``existing`` is set when the task already has an
    effective acknowledgement in this epoch, in which case the attempt must not run."""

    epoch_id: int
    task_id: str
    attempt: int
    existing: Acknowledgement | None = None


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
    ):
        self.storage = storage
        self.layout = Layout(pipeline_id)
        self.pipeline_id = pipeline_id
        self.config = config or CheckpointConfig()
        self.clock = clock
        self.on_abort = on_abort
        self._barriers: dict[int, Barrier] = {}
        self._decided: dict[int, EpochMetadata] = {}

    # ------------------------------------------------------------------ documents
    def _uri(self, key: str) -> str:
        return self.storage.uri(key)

    def registry(self) -> Registry:
        """The current registry (an empty one before the first epoch)."""
        try:
            data, _ = self.storage.read(self.layout.counter)
        except NotFound:
            return Registry()
        return Registry.from_bytes(data, self._uri(self.layout.counter))

    def _update_registry(self, mutate: Callable[[Registry], tuple[Registry | None, Any]]) -> Any:
        key = self.layout.counter

        def parse(b: bytes) -> Registry:
            return Registry.from_bytes(b, self._uri(key))

        def step(cur: Registry | None) -> tuple[bytes | None, Any]:
            if cur is None:
                cur = self._bootstrap_registry()
            new, result = mutate(cur)
            if new is None:
                return None, result
            return new.to_bytes(writer_identity(), now_iso(self.clock())), result

        return cas_update(self.storage, key, parse, step)

    def _bootstrap_registry(self) -> Registry:
        """An absent registry with epochs present (deleted by hand) must not reuse ids."""
        existing = [self.layout.parse_epoch_dir(p)
                    for p in self.storage.list_dirs(self.layout.epochs_prefix)]
        return Registry(last_epoch_id=max([e for e in existing if e] or [0]))

    def barrier(self, epoch_id: int) -> Barrier:
        """The epoch's barrier (cached: barriers are immutable)."""
        epoch_id = validate_epoch_id(epoch_id)
        if epoch_id not in self._barriers:
            key = self.layout.barrier(epoch_id)
            try:
                data, _ = self.storage.read(key)
            except NotFound:
                # No storage path in the message: it reaches API answers and task logs.
                raise EpochNotFound(
                    f"epoch {epoch_id} of pipeline {self.pipeline_id!r} does not exist "
                    "(it has no barrier)") from None
            self._barriers[epoch_id] = Barrier.from_bytes(data, self._uri(key))
        return self._barriers[epoch_id]

    def _barrier_or_none(self, epoch_id: int) -> Barrier | None:
        """The barrier, or None for an id burned by a crash before its barrier was written."""
        try:
            return self.barrier(epoch_id)
        except EpochNotFound:
            return None

    def metadata(self, epoch_id: int) -> EpochMetadata | None:
        """The epoch's decided outcome, or None while it is pending."""
        epoch_id = validate_epoch_id(epoch_id)
        if epoch_id in self._decided:
            return self._decided[epoch_id]
        key = self.layout.metadata(epoch_id)
        try:
            data, _ = self.storage.read(key)
        except NotFound:
            return None
        meta = EpochMetadata.from_bytes(data, self._uri(key))
        self._decided[epoch_id] = meta
        return meta

    def decision(self, epoch_id: int, *, metadata_absent: bool = False,
                 barrier_read: bool = False) -> Decision | None:
        """How the epoch ended, read from what survives retention (PROTOCOL 6.11): its
        ``_metadata``, else its failure record, else the registry; None while it is pending.
        Raises :class:`EpochNotFound` for an id never allocated.

        ``metadata_absent``: the caller has just found no ``_metadata`` (not read again).
        ``barrier_read``: the caller has just read the barrier from storage, not from this
        coordinator's cache (its existence is not checked again)."""
        epoch_id = validate_epoch_id(epoch_id)
        meta = None if metadata_absent else self.metadata(epoch_id)
        if meta is not None:
            return Decision.of_metadata(meta)
        # Retention deletes the barrier before _metadata: a barrier still there after
        # _metadata was absent means the epoch was pending when _metadata was read.
        if barrier_read or self.storage.exists(self.layout.barrier(epoch_id)):
            return None
        rec = read_failure(self.storage, self.layout, epoch_id)
        if rec is not None:
            return Decision.of_failure(rec)
        reg = self.registry()
        if reg.decided(epoch_id):
            return Decision.forgotten(epoch_id)
        if reg.open_entry(epoch_id) is not None:
            return None  # allocated, its barrier not written yet (or never: a burned id)
        raise EpochNotFound(f"epoch {epoch_id} of pipeline {self.pipeline_id!r} does not "
                            "exist")

    def _decided_metadata(self, epoch_id: int) -> EpochMetadata | None:
        """The decision as ``_metadata`` (from the failure record once retention deleted
        it), None while pending; EpochAlreadyDecided when only the registry remembers the
        epoch, so that nothing writes a second decision into a deleted epoch."""
        decision = self.decision(epoch_id)
        if decision is None:
            return None
        meta = decision.as_metadata()
        if meta is None:
            raise EpochAlreadyDecided(decision.describe())
        return meta

    def read_ack(self, key: str) -> Acknowledgement:
        data, _ = self.storage.read(key)
        return Acknowledgement.from_bytes(data, self._uri(key))

    # ------------------------------------------------------------------ begin
    def begin_epoch(
        self,
        plan: Mapping[str, TaskPlan],
        run_id: str,
        *,
        lineage: str = "main",
        data_interval: dict[str, str] | None = None,
        input_range: Any = None,
        parent_epoch_id: int | None | object = _LATEST,
        parent_savepoint: str | None = None,
        publish_on_complete: bool = True,
        allow_non_restored_state: bool = False,
        promote: bool = False,
        owner: str | None = None,
    ) -> Barrier:
        """Allocate the next epoch id and write its barrier (PROTOCOL 6.1).

        The parent defaults to the lineage's latest completed epoch. An explicit parent
        epoch or savepoint is checked against the plan: state of tasks the plan lacks is an
        error unless ``allow_non_restored_state`` (Flink's flag of the same name).
        ``promote``: this backfill epoch continues the main line when it completes, if its
        input reaches main's (PROTOCOL 6.5, 1.4). ``owner``: the DAG opening the epoch; the
        first begin records it, and a begin of another owner is refused (1.7).
        """
        validate_id(lineage, "lineage")
        if promote and lineage == MAIN:
            raise ValueError("only a backfill lineage's epoch can be promoted to main")
        if parent_epoch_id is _LATEST and parent_savepoint is None and lineage != MAIN:
            parent_epoch_id, parent_savepoint = self._origin_parent(lineage)
        if not plan:
            raise ValueError("an epoch needs at least one task in its plan")
        for task, tp in plan.items():
            validate_id(task, "task id")
            for up in tp.upstream:
                if up not in plan:
                    raise ValueError(f"task {task!r} has upstream {up!r} that is not in the plan")
        if parent_savepoint is not None:
            from .savepoints import read_savepoint

            sp = read_savepoint(self.storage, self.layout, parent_savepoint)
            self._check_mapping(set(sp.acks), plan, f"savepoint {parent_savepoint!r}",
                                allow_non_restored_state)
            parent_epoch_id = None
        elif parent_epoch_id is not _LATEST and parent_epoch_id is not None:
            parent_epoch_id = validate_epoch_id(parent_epoch_id)
            meta = self.metadata(parent_epoch_id)
            if meta is None or not meta.completed:
                raise CheckpointError(
                    f"cannot restore from epoch {parent_epoch_id}: it is not completed")
            self._check_mapping(set(meta.acks), plan, f"epoch {parent_epoch_id}",
                                allow_non_restored_state)

        reg = self.recover()
        self._check_owner(reg, owner)  # before anything is expired, verified or written
        if self.expire_overdue():
            reg = self.registry()
        if lineage == MAIN:
            self._wait_for_promoting_backfill(reg)
        live = [o for o in reg.open if o.lineage == lineage and o.run_id != str(run_id)]
        if len(live) >= self.config.max_concurrent_epochs and self.expire_lost_runners(live):
            reg = self.registry()
        # The parent is chosen, and verified, before an id is allocated: a refusal here
        # (malformed metadata) must not leave a burned id behind to block the next try.
        fallback: list[dict[str, Any]] = []
        if parent_epoch_id is _LATEST:
            parent_epoch_id = self._latest_from(reg.lineage(lineage).latest_completed, lineage)
            if parent_epoch_id is not None and self.config.verify_restore:
                parent_epoch_id, fallback = self._verified_parent(parent_epoch_id, lineage)
            if parent_epoch_id is not None:
                self._check_plan_change(parent_epoch_id, plan, allow_non_restored_state)

        now = self.clock()
        created = now_iso(now)
        deadline = now_iso(now + self.config.timeout_seconds)
        burned = self._own_burned_entry(reg, str(run_id), lineage)

        def allocate(reg: Registry) -> tuple[Registry, int]:
            self._check_owner(reg, owner)
            st = reg.lineage(lineage)
            live = [o for o in reg.open if o.lineage == lineage]
            if len(live) >= self.config.max_concurrent_epochs:
                raise TooManyConcurrentEpochs(
                    f"pipeline {self.pipeline_id!r} lineage {lineage!r} has {len(live)} pending "
                    f"epoch(s) {[o.epoch_id for o in live]}; max_concurrent_epochs is "
                    f"{self.config.max_concurrent_epochs}")
            if st.last_started_at and self.config.min_pause_seconds:
                wait = parse_iso(st.last_started_at) + self.config.min_pause_seconds - now
                if wait > 0:
                    raise MinPauseNotElapsed(
                        f"pipeline {self.pipeline_id!r}: the previous epoch started "
                        f"{self.config.min_pause_seconds - wait:.1f}s ago; min_pause_seconds is "
                        f"{self.config.min_pause_seconds}", retry_after=wait)
            new_id = reg.last_epoch_id + 1
            entry = OpenEpoch(new_id, lineage, created, deadline, str(run_id))
            reg = replace(reg, last_epoch_id=new_id, open=(*reg.open, entry),
                          owner=reg.owner or owner)
            reg = reg.with_lineage(lineage, replace(st, last_started_at=created))
            return reg, new_id

        if burned is not None:
            # This run's previous try allocated the id and died before the barrier: the id
            # is this run's, so it is completed now rather than left to block until expiry.
            epoch_id, created, deadline = burned.epoch_id, burned.created_at, burned.deadline
            log.warning("pipeline %s: run %s reclaims epoch %d, allocated by its previous "
                        "try without a barrier", self.pipeline_id, run_id, epoch_id)
        else:
            epoch_id = self._update_registry(allocate)

        barrier = Barrier(
            pipeline_id=self.pipeline_id, epoch_id=epoch_id, run_id=str(run_id),
            lineage=lineage, plan=dict(plan), created_at=created, deadline=deadline,
            config=self.config, mode=self.config.mode, data_interval=data_interval,
            input_range=input_range, parent_epoch_id=parent_epoch_id,  # type: ignore[arg-type]
            parent_savepoint=parent_savepoint, publish_on_complete=publish_on_complete,
            writer=writer_identity(), restore_fallback=tuple(fallback), promote=promote,
        )
        key = self.layout.barrier(epoch_id)
        try:
            self.storage.create(key, barrier.to_bytes())
        except PreconditionFailed:
            if burned is not None:  # a concurrent try of the same run wrote it first
                self._barriers.pop(epoch_id, None)
                return self.barrier(epoch_id)
            raise StorageError(
                f"epoch id {epoch_id} was just allocated but {self._uri(key)} exists: the "
                "registry is behind the stored epochs; refusing to reuse the id") from None
        self._barriers[epoch_id] = barrier
        self._index_run(barrier)
        log.info("pipeline %s: began epoch %d (run %s, lineage %s, parent %s)",
                 self.pipeline_id, epoch_id, run_id, lineage, parent_epoch_id)
        return barrier

    def _check_owner(self, reg: Registry, owner: str | None) -> None:
        if owner is not None and reg.owner is not None and reg.owner != owner:
            raise PipelineOwnedElsewhere(
                f"pipeline {self.pipeline_id!r} on this storage is checkpointed by DAG "
                f"{reg.owner!r}; DAG {owner!r} needs a pipeline id of its own "
                "(CheckpointSettings.pipeline_id) or other storage")

    def _wait_for_promoting_backfill(self, reg: Registry) -> None:
        """(1.4) Refuse a main epoch while a backfill that asked to continue the main line
        is running: it has no promotion record yet, and an open epoch or an epoch (or its
        origin) started within ``timeout_seconds``. A backfill that died stops holding main
        back one timeout after its last start."""
        now = self.clock()
        # One listing; only undecided origins are read (decided ones have a promotion record).
        for origin in list_origins(self.storage, self.layout, undecided_only=True):
            if not origin.promote:
                continue
            last = reg.lineage(origin.lineage).last_started_at or origin.created_at
            open_ids = [o.epoch_id for o in reg.open if o.lineage == origin.lineage]
            if open_ids or parse_iso(last) + self.config.timeout_seconds > now:
                raise PromotingBackfillRunning(
                    f"pipeline {self.pipeline_id!r}: backfill {origin.lineage} (runs "
                    f"{origin.start}..{origin.end}) will continue the main line when it "
                    "completes; main runs wait for it")

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

    def epochs_of_run(self, run_id: str, lineage: str = "main") -> list[int]:
        """The epochs ``run_id`` opened in ``lineage``, ascending (one listing)."""
        prefix = self.layout.run_index_prefix(lineage, str(run_id))
        ids = [o.key[len(prefix):] for o in self.storage.list(prefix)]
        return sorted(int(i) for i in ids if len(i) == 10 and i.isdigit())

    def completed_epoch_of_run(self, run_id: str, lineage: str = "main") -> int | None:
        """The epoch ``run_id`` completed, if it did (its newest epoch, when completed)."""
        ids = self.epochs_of_run(run_id, lineage)
        if not ids:
            return None
        meta = self.metadata(ids[-1])
        if meta is None or not meta.completed:
            return None
        self._finish_if_interrupted(meta)  # completed but never published: publish now
        return ids[-1]

    def next_attempt(self, epoch_id: int) -> int:
        """One more than the highest attempt of any task in the epoch: the attempt number a
        driver that resumes the epoch uses, fencing whatever ran before it."""
        tasks = scan_epoch_tasks(self.storage, self.layout, epoch_id)
        return 1 + max((ta.highest for ta in tasks.values()), default=0)

    def _own_burned_entry(self, reg: Registry, run_id: str, lineage: str) -> OpenEpoch | None:
        """An open entry allocated by ``run_id`` that has neither barrier nor decision."""
        for entry in reg.open:
            if entry.run_id != run_id or entry.lineage != lineage:
                continue
            try:
                self.barrier(entry.epoch_id)
            except EpochNotFound:
                if self.metadata(entry.epoch_id) is None:
                    return entry
        return None

    def _verified_parent(self, epoch_id: int,
                         lineage: str) -> tuple[int | None, list[dict[str, Any]]]:
        """The newest completed epoch of ``lineage``, from ``epoch_id`` down, whose files
        all verify (PROTOCOL 6.1), and the epochs skipped on the way with their problems.
        None when none verifies: the epoch then starts from empty state and its sources
        replay all input, which is slow but exactly-once."""
        skipped: list[dict[str, Any]] = []
        older: list[int] | None = None
        candidate: int | None = epoch_id
        while candidate is not None:
            problems = self._restore_problems(candidate, lineage)
            if problems is None:
                pass  # not a completed epoch of this lineage
            elif not problems:
                return candidate, skipped
            else:
                log.warning("pipeline %s: epoch %d cannot be restored (%s); falling back to an "
                            "earlier completed epoch", self.pipeline_id, candidate, problems[0])
                skipped.append({"epoch_id": candidate, "problems": problems[:5]})
            if older is None:
                older = [e for e in self.epoch_ids() if e < epoch_id]
            candidate = older.pop() if older else None
        return None, skipped

    def _restore_problems(self, epoch_id: int, lineage: str) -> list[str] | None:
        """Why a completed epoch of ``lineage`` cannot be restored ([] when it can); None
        when ``epoch_id`` is not a completed epoch of that lineage. A malformed or
        newer-version ``_metadata`` is not a reason to fall back: it is refused (raised)."""
        meta = self.metadata(epoch_id)
        if meta is None or not meta.completed or not self._on_line(meta, lineage):
            return None
        try:
            return self._verify_for_restore(epoch_id).problems
        except (NotFound, MalformedDocument) as exc:  # an acknowledgement lost or damaged
            return [str(exc)]

    def _verify_for_restore(self, epoch_id: int):  # noqa: ANN202 (VerifyReport)
        """Verify a completed epoch's files against the newest verification record (5.16)
        of the epoch itself or of its parent: files unchanged since are checked by size and
        etag, the others hashed; a clean verification is recorded for the next begin."""
        from .verify import read_record, verify_handles, write_record

        record = read_record(self.storage, self.layout, epoch_id)
        if record is None:
            parent = self.barrier(epoch_id).parent_epoch_id
            if parent is not None:
                record = read_record(self.storage, self.layout, parent)
        report = verify_handles(self.storage, epoch_id, self.completed_handles(epoch_id),
                                known=record.files if record else None)
        log.info("pipeline %s: epoch %d verified for restore: %d file(s) hashed (%d bytes), "
                 "%d unchanged since %s", self.pipeline_id, epoch_id, report.files_checked,
                 report.bytes_checked, report.files_unchanged,
                 f"epoch {record.epoch_id}'s record" if record else "no record")
        if report.ok and (record is None or record.epoch_id != epoch_id):
            write_record(self.storage, self.layout, report, self.clock())
        return report

    def _on_line(self, meta: EpochMetadata, lineage: str) -> bool:
        """Whether a completed epoch belongs to ``lineage``'s line of state: its own epochs,
        and for main (1.4) a backfill's epoch that was promoted to continue it."""
        if meta.lineage == lineage:
            return True
        if lineage != MAIN:
            return False
        rec = read_promotion(self.storage, self.layout, meta.lineage)
        return rec is not None and rec.promoted and rec.epoch_id == meta.epoch_id

    def _origin_parent(self, lineage: str) -> tuple[int | None | object, str | None]:
        """The parent a backfill lineage starts from before it has completed epochs."""
        origin = read_origin(self.storage, self.layout, lineage)
        if origin is None or self.latest_completed(lineage) is not None:
            return _LATEST, None
        return (origin.from_epoch, None) if origin.from_epoch else (_LATEST, origin.from_savepoint)

    def _check_plan_change(self, parent: int, plan: Mapping[str, TaskPlan],
                           allow: bool) -> None:
        """The DAG changed since the parent epoch (Flink's savepoint mapping): a new task
        starts from empty state (logged); a removed task that has state is refused unless
        ``allow`` (allowNonRestoredState)."""
        meta = self.metadata(parent)
        with_state = set(meta.acks) if meta is not None else set()
        added = sorted(set(plan) - with_state)
        if added:
            log.warning("pipeline %s: task(s) %s are not in parent epoch %d: they start from "
                        "empty state", self.pipeline_id, added, parent)
        self._check_mapping(with_state, plan, f"parent epoch {parent}", allow)

    @staticmethod
    def _check_mapping(tasks_with_state: set[str], plan: Mapping[str, TaskPlan], source: str,
                       allow: bool) -> None:
        unmapped = sorted(tasks_with_state - set(plan))
        if unmapped and not allow:
            raise RestoreMappingError(
                f"{source} holds state for task(s) {unmapped} that the plan does not have "
                "(removed from the DAG?): put them back, or allow non-restored state "
                "(allow_non_restored_state=True) to drop their state")

    # ------------------------------------------------------------------ tasks
    def _check_task(self, epoch_id: int, task_id: str, attempt: int) -> bool:
        """Validate the task against the epoch's plan; True when the barrier was read from
        storage by this call (not from the cache), which then need not be checked again."""
        validate_id(task_id, "task id")
        validate_attempt(attempt)
        fresh = epoch_id not in self._barriers
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
        return AttemptStart(epoch_id, task_id, attempt)

    def acknowledge(self, epoch_id: int, task_id: str, attempt: int,
                    handle: StateHandle) -> Acknowledgement:
        """Record the task's state handle for the epoch (Flink's AcknowledgeCheckpoint).

        Idempotent for the same attempt (the first acknowledgement stays). Refused for a
        task not in the plan, a decided epoch, or a stale attempt.
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
            return self.read_ack(eff[1].key)  # idempotent repeat
        self._refuse_if_stale(ta, epoch_id, attempt)
        self._refuse_if_decided(epoch_id, task_id, barrier_read=fresh)
        ack = Acknowledgement(task_id, attempt, now_iso(self.clock()), handle, writer_identity())
        key = self.layout.attempt_object(epoch_id, task_id, attempt, "ack")
        try:
            self.storage.create(key, ack.to_bytes())
        except PreconditionFailed:
            return self.read_ack(key)  # the same attempt acked concurrently: first one stays
        return ack

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
        return self.abort(epoch_id, "declined", f"task {task_id} declined: {reason}",
                          declined_by=task_id)

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
    def _write_decision(self, meta: EpochMetadata) -> tuple[EpochMetadata, bool]:
        """Create ``_metadata``; return (the winning metadata, whether it is ours)."""
        key = self.layout.metadata(meta.epoch_id)
        try:
            self.storage.create(key, meta.to_bytes())
        except PreconditionFailed:
            self._decided.pop(meta.epoch_id, None)
            winner = self.metadata(meta.epoch_id)
            if winner is None:  # pragma: no cover - create lost but nothing there
                raise StorageError(
                    f"lost the write of {self._uri(key)} but cannot read it") from None
            return winner, False
        self._decided[meta.epoch_id] = meta
        return meta, True

    def try_complete(self, epoch_id: int) -> EpochMetadata | None:
        """Complete the epoch if every planned task has acknowledged; else None.

        If the epoch is already decided, returns the decision (completed or aborted).
        """
        epoch_id = validate_epoch_id(epoch_id)
        existing = self._decided_metadata(epoch_id)
        if existing is not None:
            self._finish_if_interrupted(existing)
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
        meta, ours = self._write_decision(meta)
        if ours:
            log.info("pipeline %s: completed epoch %d", self.pipeline_id, epoch_id)
            self._finish(meta, barrier)
        return meta

    def _finish_if_interrupted(self, meta: EpochMetadata) -> None:
        """A decided epoch still open in the registry: its decider died (or failed, e.g. on a
        malformed manifest) before publishing; finish it now (PROTOCOL 6.6), so that a
        retried commit or a resumed run does not report success with nothing published."""
        if self.registry().open_entry(meta.epoch_id) is not None:
            self._finish(meta, self._barrier_or_none(meta.epoch_id))

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

    def abort(self, epoch_id: int, reason: str, detail: str = "", *,
              declined_by: str | None = None) -> EpochMetadata:
        """Abort the epoch unless it is already decided; return the decision.

        Only the caller whose write decides the abort notifies ``on_abort``, so an alert
        fires once however many processes race to abort.
        """
        return self._abort(epoch_id, reason, detail, declined_by)[0]

    def _abort(self, epoch_id: int, reason: str, detail: str,
               declined_by: str | None) -> tuple[EpochMetadata, bool]:
        epoch_id = validate_epoch_id(epoch_id)
        if reason not in ABORT_REASONS:
            raise ValueError(f"abort reason must be one of {ABORT_REASONS}, not {reason!r}")
        existing = self._decided_metadata(epoch_id)
        if existing is not None:
            return existing, False
        barrier = self._barrier_or_none(epoch_id)
        missing = self.missing_tasks(epoch_id) if barrier else []
        lineage = barrier.lineage if barrier else self._open_lineage(epoch_id)
        meta = EpochMetadata(epoch_id, lineage, "aborted", now_iso(self.clock()),
                             reason=reason, detail=detail.replace("\n", " ")[:500],
                             missing_tasks=tuple(missing), declined_by=declined_by,
                             writer=writer_identity())
        meta, ours = self._write_decision(meta)
        if ours:
            log.warning("pipeline %s: aborted epoch %d (%s): %s; missing tasks: %s",
                        self.pipeline_id, epoch_id, reason, detail, missing or "none")
            self._finish(meta, barrier)
            if self.on_abort is not None:
                try:
                    self.on_abort(meta, barrier)
                except Exception:  # an alert channel failing must not undo the abort
                    log.exception("abort listener failed for epoch %d", epoch_id)
        return meta, ours

    def _open_lineage(self, epoch_id: int) -> str:
        entry = self.registry().open_entry(epoch_id)
        return entry.lineage if entry else "main"

    def _finish(self, meta: EpochMetadata, barrier: Barrier | None) -> None:
        """What follows a decision: publish (or record the failure), then update the
        registry (PROTOCOL 6.5)."""
        if meta.completed and barrier is not None and barrier.publish_on_complete:
            self._publish(meta, barrier)
        if not meta.completed:
            try:
                record_failure(self.storage, self.layout, meta, barrier)
            except CheckpointError as exc:  # retention writes it later; the abort stands
                log.warning("pipeline %s: failure record of epoch %d not written: %s",
                            self.pipeline_id, meta.epoch_id, exc)
        promoted = bool(meta.completed and barrier is not None and barrier.promote and
                        self._promotion(meta, barrier))

        def apply(reg: Registry) -> tuple[Registry | None, None]:
            st, main = reg.lineage(meta.lineage), reg.lineage(MAIN)
            decided = reg.open_entry(meta.epoch_id) is None and (
                not meta.completed or (st.latest_completed or 0) >= meta.epoch_id)
            moved = not promoted or (main.latest_completed or 0) >= meta.epoch_id
            if decided and moved:
                return None, None  # applied already
            if not decided:
                reg = reg.with_decision(meta.epoch_id, meta.lineage, meta.completed,
                                        counts=counts_as_failure(meta.reason))
            if not moved:  # the main line continues from this epoch (6.5, 1.4)
                reg = reg.with_lineage(MAIN, replace(reg.lineage(MAIN),
                                                     latest_completed=meta.epoch_id))
            return reg, None

        self._update_registry(apply)

    def _promotion(self, meta: EpochMetadata, barrier: Barrier) -> bool:
        """Decide, once, whether a completed promoting epoch continues the main line: when
        main's latest completed epoch is older and its input does not reach further."""
        rec = read_promotion(self.storage, self.layout, meta.lineage)
        if rec is None:
            main = self.latest_completed(MAIN)
            main_barrier = self._barrier_or_none(main) if main else None
            main_until = main_barrier.input_until if main_barrier else None
            ours = barrier.input_until
            promoted = (main is None or main < meta.epoch_id) and (
                main_until is None or (ours is not None and ours >= main_until))
            rec = record_promotion(self.storage, self.layout, Promotion(
                meta.lineage, meta.epoch_id, promoted, main, ours, main_until,
                now_iso(self.clock())))
            log.info("pipeline %s: backfill %s epoch %d %s", self.pipeline_id, meta.lineage,
                     meta.epoch_id, f"continues the main line (superseding epoch {main})"
                     if rec.promoted else f"not promoted: main (epoch {main}) has input "
                     f"until {main_until}, the backfill until {ours}")
        return rec.promoted and rec.epoch_id == meta.epoch_id

    def _publish(self, meta: EpochMetadata, barrier: Barrier) -> None:
        outputs: dict[str, OutputRef] = {}
        for task, tp in barrier.plan.items():
            if tp.publishes:
                outputs.update(self.read_ack(meta.acks[task].key).state_handle.outputs)
        # Table outputs first (one commit each, idempotent by the epoch's transaction),
        # then the manifest, which names the table versions (PROTOCOL 6.12).
        outputs = commit_tables(self.pipeline_id, meta.lineage, meta.epoch_id, outputs,
                                getattr(self.storage, "endpoint_url", None))
        publish(self.storage, self.layout, meta.epoch_id, meta.lineage, outputs, self.clock())

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
                meta, ours = self._abort(entry.epoch_id, "timeout",
                                         f"not completed within "
                                         f"{self.config.timeout_seconds:g}s "
                                         f"(deadline {entry.deadline})", None)
                if ours:
                    decided.append(meta)
            elif meta.completed:
                decided.append(meta)
        return decided

    def expire_lost_runners(self, entries: list[OpenEpoch]) -> list[EpochMetadata]:
        """Abort, as ``runner_lost``, every pending epoch among ``entries`` whose driver's
        lease expired (PROTOCOL 6.1). Epochs without a lease are left alone."""
        from .lease import lease_expired

        decided = []
        for entry in entries:
            if self.metadata(entry.epoch_id) is not None or \
                    not lease_expired(self, entry.epoch_id):
                continue
            meta, ours = self._abort(entry.epoch_id, "runner_lost",
                                     f"its runner stopped renewing its lease for more than "
                                     f"{self.config.lease_seconds:g}s", None)
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
            self._finish(meta, self._barrier_or_none(entry.epoch_id))
            finished = True
        return self.registry() if finished else reg

    def open_epoch_for_run(self, run_id: str, lineage: str = "main") -> Barrier | None:
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
    def _latest_from(self, pointer: int | None, lineage: str,
                     reg: Registry | None = None) -> int | None:
        reg = reg or self.registry()
        best = pointer
        for entry in reg.open:
            if entry.lineage != lineage or entry.epoch_id <= (best or 0):
                continue
            meta = self.metadata(entry.epoch_id)
            if meta is not None and meta.completed:
                best = entry.epoch_id
        return best

    def latest_completed(self, lineage: str = "main") -> int | None:
        """The lineage's latest completed epoch: 1 + |open| reads, whatever the history."""
        validate_id(lineage, "lineage")
        reg = self.registry()
        return self._latest_from(reg.lineage(lineage).latest_completed, lineage, reg)

    def completed_handles(self, epoch_id: int) -> dict[str, StateHandle]:
        """Every task's state handle of a completed epoch."""
        meta = self.metadata(epoch_id)
        if meta is None or not meta.completed:
            raise CheckpointError(f"epoch {epoch_id} is not completed")
        return {t: self.read_ack(a.key).state_handle for t, a in meta.acks.items()}

    def restore_handle(self, epoch_id: int, task_id: str) -> StateHandle | None:
        """The state handle ``task_id`` must restore from when running ``epoch_id``: the
        task's handle in the barrier's parent epoch or savepoint (None: start empty)."""
        barrier = self.barrier(epoch_id)
        if task_id not in barrier.plan:
            raise UnknownTask(f"task {task_id!r} is not in the plan of epoch {epoch_id}")
        if barrier.parent_savepoint:
            from .savepoints import read_savepoint

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
                f"({self._uri(ref.key)}): was it deleted by hand?") from None

    def epoch_ids(self) -> list[int]:
        """Ids of every epoch that has a directory in storage, ascending."""
        ids = [self.layout.parse_epoch_dir(p)
               for p in self.storage.list_dirs(self.layout.epochs_prefix)]
        return sorted(i for i in ids if i)

    def status(self, epoch_id: int) -> str:
        """``completed``, ``aborted``, ``decided`` (deleted, its outcome no longer kept),
        ``pending`` or ``unknown`` (never allocated)."""
        try:
            decision = self.decision(epoch_id)
        except EpochNotFound:
            return "unknown"
        return "pending" if decision is None else decision.status

    def check_failure_budget(self, lineage: str = "main") -> None:
        """Raise :class:`FailureBudgetExhausted` when more consecutive epochs of the lineage
        failed than ``tolerable_failed_epochs`` (PROTOCOL 6.1): the caller fails its run.
        Only failures count (``FAILURE_REASONS``): cancellations do not (6.5)."""
        st: LineageState = self.registry().lineage(lineage)
        if st.consecutive_failed > self.config.tolerable_failed_epochs:
            raise FailureBudgetExhausted(
                f"pipeline {self.pipeline_id!r} lineage {lineage!r}: {st.consecutive_failed} "
                f"consecutive failed epoch(s), tolerable "
                f"{self.config.tolerable_failed_epochs}")

    def failure_budget_exhausted(self, lineage: str = "main") -> bool:
        """True when more consecutive epochs failed than ``tolerable_failed_epochs``."""
        st: LineageState = self.registry().lineage(lineage)
        return st.consecutive_failed > self.config.tolerable_failed_epochs
