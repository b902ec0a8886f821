"""Task attempts and their acknowledgements (Flink's ``PendingCheckpoint.acknowledgeTask``
and its fencing of stale attempts, PROTOCOL 6.3-6.4): register an attempt, fencing lower
ones; record the engine operation it started; store its state handle, once; let it decline
the epoch; and hand a task the handles of its upstream tasks (barrier alignment).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from checkpointing.coordination.epoch_decisions import EpochDecisions
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.errors import (
    CheckpointError,
    EpochAlreadyDecided,
    EpochNotFound,
    PreconditionFailed,
    StaleAttempt,
    UnknownTask,
)
from checkpointing.ids import validate_attempt, validate_epoch_id, validate_id
from checkpointing.protocol.acknowledgement import Acknowledgement, AckResult, AckStatus
from checkpointing.protocol.attempts import TaskAttempts, scan_task
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.epoch_metadata import AbortReason, EpochMetadata
from checkpointing.protocol.listener import EpochListener
from checkpointing.protocol.listings import LISTING, FileListing
from checkpointing.protocol.markers import ATTEMPT_START, DECLINE
from checkpointing.protocol.operations import OPERATION, EngineOperation
from checkpointing.protocol.state_handle import StateHandle
from checkpointing.storage import ObjectInfo

log = logging.getLogger("checkpointing.coordination.coordinator")


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


class TaskAcknowledgements:
    """The task side of one pipeline's epochs: attempts, acknowledgements, declines."""

    def __init__(self, store: EpochStore, decisions: EpochDecisions, listener: EpochListener,
                 clock: Callable[[], float]):
        self.store, self.decisions, self.listener, self.clock = store, decisions, listener, clock

    def register_attempt(self, epoch_id: int, task_id: str, attempt: int) -> AttemptStart:
        """Fence older attempts before this one runs (PROTOCOL 6.3).

        When the task already has an effective acknowledgement, nothing is registered and
        ``existing`` holds it: the caller must not run the task again.
        """
        fresh = self._check_task(epoch_id, task_id, attempt)
        ta = scan_task(self.store.storage, self.store.layout, epoch_id, task_id)
        eff = ta.effective_ack
        if eff is not None:
            return AttemptStart(epoch_id, task_id, attempt, self.store.read_ack(eff[1].key))
        self._refuse_if_decided(epoch_id, task_id, barrier_read=fresh)
        self._refuse_if_stale(ta, epoch_id, attempt)
        # Attempt 1 fences nothing (no lower attempt exists), so it writes no marker:
        # one request less on every task's path.
        if attempt > 1 and attempt not in ta.starts:
            body = {"task_id": task_id, "attempt": attempt,
                    "started_at": now_iso(self.clock()), "writer": writer_identity()}
            self._create_once(epoch_id, task_id, attempt, "start", ATTEMPT_START.encode(body))
        return AttemptStart(epoch_id, task_id, attempt,
                            resume=self._resumable(ta.resumable_operation(attempt)))

    def record_operation(self, epoch_id: int, op: EngineOperation) -> None:
        """Record the long engine action ``op.attempt`` starts now (PROTOCOL 5.17), for its
        next attempt to resume should this one be killed. A plain write: a hint. Refused
        in a decided epoch (6.11), whose files retention may have deleted: the record must
        not bring its directory back."""
        self._refuse_if_decided(epoch_id, op.task_id)
        key = self.store.layout.attempt_object(epoch_id, op.task_id, op.attempt, "operation")
        self.store.storage.write(key, OPERATION.encode({**op.to_json(),
                                                  "writer": writer_identity()}))

    def pin_listing(self, epoch_id: int, source: str, listed: FileListing) -> FileListing:
        """The listing of ``source`` the epoch reads (PROTOCOL 5.21, 6.16): the one the
        epoch's first attempt to list it recorded, else ``listed``, recorded now
        (create-once; a writer that lost the race reads the winner's). The create is
        refused in a decided epoch (6.11), as every write of a task; reading a recorded
        listing writes nothing, so a later reader pays that one read."""
        key = self.store.layout.listing(epoch_id, source)
        data = self.store.storage.read_optional(key)
        if data is None:
            self._check_task(epoch_id, listed.task_id, listed.attempt)
            self._refuse_if_decided(epoch_id, listed.task_id)
            try:
                self.store.storage.create(key, LISTING.encode(
                    {**listed.to_json(), "writer": writer_identity()}))
                return listed
            except PreconditionFailed:  # another attempt listed it first: its keys hold
                data = self.store.storage.read(key)[0]
        return LISTING.decode(data, key)

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
        ta = scan_task(self.store.storage, self.store.layout, epoch_id, task_id)
        eff = ta.effective_ack
        if eff is not None and eff[0] == attempt:
            result = AckResult(AckStatus.DUPLICATE, self.store.read_ack(eff[1].key))
        else:
            try:
                self._refuse_if_stale(ta, epoch_id, attempt)
                self._refuse_if_decided(epoch_id, task_id, barrier_read=fresh)
            except (StaleAttempt, EpochAlreadyDecided) as exc:
                self.listener.ack_refused(epoch_id, task_id, str(exc))
                raise
            ack = Acknowledgement(task_id, attempt, now_iso(self.clock()), handle,
                                  writer_identity())
            key = self.store.layout.attempt_object(epoch_id, task_id, attempt, "ack")
            try:
                self.store.storage.create(key, ack.to_bytes())
                result = AckResult(AckStatus.SUCCESS, ack)
                self.listener.task_acknowledged(self.store.barrier(epoch_id), ack)
            except PreconditionFailed:  # the same attempt acked concurrently: first stays
                result = AckResult(AckStatus.DUPLICATE, self.store.read_ack(key))
        if complete:
            result = replace(result, completed=self._complete_if_last(epoch_id, task_id))
        return result

    def decline(self, epoch_id: int, task_id: str, attempt: int, reason: str) -> EpochMetadata:
        """A task refuses the epoch (bad data, validation): the epoch is aborted."""
        epoch_id = validate_epoch_id(epoch_id)
        fresh = self._check_task(epoch_id, task_id, attempt)
        self._refuse_if_decided(epoch_id, task_id, barrier_read=fresh)
        ta = scan_task(self.store.storage, self.store.layout, epoch_id, task_id)
        self._refuse_if_stale(ta, epoch_id, attempt)
        body = {"task_id": task_id, "attempt": attempt, "reason": reason,
                "declined_at": now_iso(self.clock()), "writer": writer_identity()}
        self._create_once(epoch_id, task_id, attempt, "decline", DECLINE.encode(body))
        return self.decisions.abort(epoch_id, AbortReason.DECLINED,
                                    f"task {task_id} declined: {reason}", declined_by=task_id)

    def _create_once(self, epoch_id: int, task_id: str, attempt: int, kind: str,
                     data: bytes) -> None:
        """Create one of an attempt's marker documents; one already there (the same attempt
        registered or declining twice) stays: idempotent."""
        key = self.store.layout.attempt_object(epoch_id, task_id, attempt, kind)
        try:
            self.store.storage.create(key, data)
        except PreconditionFailed:
            pass

    def acknowledged_handle(self, epoch_id: int, task_id: str) -> StateHandle | None:
        """The state handle task ``task_id`` acknowledged epoch ``epoch_id`` with (its
        effective acknowledgement's), None while it has not."""
        eff = scan_task(self.store.storage, self.store.layout, validate_epoch_id(epoch_id),
                        task_id).effective_ack
        return None if eff is None else self.store.read_ack(eff[1].key).state_handle

    def upstream_handles(self, epoch_id: int, task_id: str) -> dict[str, StateHandle]:
        """The current epoch's state handles of the task's upstream tasks.

        Raises :class:`AlignmentError` naming any upstream task without an effective
        acknowledgement: a task never snapshots epoch N before its inputs of N exist.
        """
        barrier = self.store.barrier(epoch_id)
        if task_id not in barrier.plan:
            raise UnknownTask(f"task {task_id!r} is not in the plan of epoch {epoch_id}")
        out, missing = {}, []
        for up in barrier.plan[task_id].upstream:
            eff = scan_task(self.store.storage, self.store.layout, epoch_id, up).effective_ack
            if eff is None:
                missing.append(up)
            else:
                out[up] = self.store.read_ack(eff[1].key).state_handle
        if missing:
            raise AlignmentError(
                f"task {task_id!r} cannot snapshot epoch {epoch_id}: upstream task(s) "
                f"{missing} have not acknowledged it")
        return out

    def _check_task(self, epoch_id: int, task_id: str, attempt: int) -> bool:
        """Validate the task against the epoch's plan; True when the barrier was read from
        storage by this call (not from the cache), which then need not be checked again."""
        validate_id(task_id, "task id")
        validate_attempt(attempt)
        fresh = not self.store.barrier_cached(epoch_id)
        try:
            barrier = self.store.barrier(epoch_id)
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
        decision = self.store.decision(epoch_id, barrier_read=barrier_read)
        if decision is not None:
            raise EpochAlreadyDecided(f"{decision.describe()}; task {task_id!r} cannot "
                                      "change it")

    @staticmethod
    def _refuse_if_stale(ta: TaskAttempts, epoch_id: int, attempt: int) -> None:
        if ta.highest > attempt:
            raise StaleAttempt(
                f"attempt {attempt} of task {ta.task_id!r} in epoch {epoch_id} is stale: "
                f"attempt {ta.highest} exists")

    def _resumable(self, info: ObjectInfo | None) -> EngineOperation | None:
        """The operation record at ``info`` (a hint: unreadable means none, 5.17)."""
        if info is None:
            return None
        try:
            return OPERATION.decode(self.store.storage.read(info.key)[0], info.key)
        except (CheckpointError, OSError) as exc:
            log.warning("pipeline %s: operation record %s ignored: %s", self.store.pipeline_id,
                        info.key, exc)
            return None

    def _complete_if_last(self, epoch_id: int, task_id: str) -> EpochMetadata | None:
        """The epoch's decision if ``task_id``'s acknowledgement was its last (it completes
        it); None when a task is still to acknowledge or the completion failed."""
        plan = self.store.barrier(epoch_id).plan
        if any(task_id in tp.upstream for tp in plan.values()):
            return None  # a task downstream has yet to acknowledge: this one is not last
        try:
            meta = self.decisions.try_complete(epoch_id)
        except Exception as exc:  # noqa: BLE001 - whoever completes next finishes it
            log.warning("task %s: epoch %d not completed on its acknowledgement (%s); the "
                        "commit step completes it", task_id, epoch_id, exc)
            return None
        if meta is not None and meta.completed:
            log.info("task %s acknowledged last: epoch %d completed", task_id, epoch_id)
        return meta
