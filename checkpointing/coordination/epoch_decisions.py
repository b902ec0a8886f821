"""How an epoch's end is decided (Flink's ``CheckpointCoordinator`` completing or aborting a
``PendingCheckpoint``, and its checkpoint canceller): complete an epoch once every planned
task acknowledged, abort it (declined, timed out, cancelled, its runner lost), and finish
what a crash interrupted. Every decision is one conditional write of ``_metadata``
(PROTOCOL 6.5): exactly one process's write wins, and only that process reports it and runs
what follows (:class:`~checkpointing.coordination.epoch_finisher.EpochFinisher`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_finisher import EpochFinisher
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.lease import runner_lost
from checkpointing.errors import CheckpointError, EpochIncomplete, EpochNotFound
from checkpointing.ids import validate_epoch_id
from checkpointing.protocol.attempts import TaskAttempts, scan_epoch_tasks
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.documents import now_iso, parse_iso, writer_identity
from checkpointing.protocol.epoch_metadata import ABORT_REASONS, AbortReason, AckRef, EpochMetadata
from checkpointing.protocol.listener import EpochListener
from checkpointing.protocol.registry import MAIN, OpenEpoch, Registry

log = logging.getLogger("checkpointing.coordination.coordinator")

#: Called once per aborted epoch, by the process whose write decided the abort.
AbortListener = Callable[[EpochMetadata, "Barrier | None"], None]


class EpochDecisions:
    """Completes and aborts the epochs of one pipeline."""

    def __init__(self, store: EpochStore, config: CheckpointConfig, finisher: EpochFinisher,
                 listener: EpochListener, clock: Callable[[], float],
                 on_abort: AbortListener | None):
        """``on_abort``: called once per aborted epoch, by the caller whose write decided
        it; fixed when the coordinator is built."""
        self.store, self.config, self.finisher = store, config, finisher
        self.listener, self.clock, self.on_abort = listener, clock, on_abort

    def try_complete(self, epoch_id: int) -> EpochMetadata | None:
        """Complete the epoch if every planned task has acknowledged; else None.

        If the epoch is already decided, returns the decision (completed or aborted).
        """
        epoch_id = validate_epoch_id(epoch_id)
        existing = self.store.decided_metadata(epoch_id)
        if existing is not None:
            self.finisher.finish_if_interrupted(existing)
            return existing
        barrier = self.store.barrier(epoch_id)
        tasks = scan_epoch_tasks(self.store.storage, self.store.layout, epoch_id)
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
            log.info("pipeline %s: completed epoch %d", self.store.pipeline_id, epoch_id)
            self.finisher.finish(meta, barrier)
            self._report_decision(meta, barrier, last)
        return meta

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
        barrier = self.store.barrier(epoch_id)
        tasks = scan_epoch_tasks(self.store.storage, self.store.layout, epoch_id)
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
        for entry in sorted(self.store.registry().open, key=lambda o: o.epoch_id):
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

    def expire_overdue(self) -> list[EpochMetadata]:
        """Decide every open epoch past its deadline (Flink's checkpoint canceller).

        A fully acknowledged overdue epoch is completed (its coordinator died before
        deciding); any other is aborted with reason ``timeout``, naming the missing tasks.
        Returns the decisions this call wrote.
        """
        now = self.clock()
        decided = []
        for entry in self.store.registry().open:
            if parse_iso(entry.deadline) > now or self.store.metadata(entry.epoch_id) is not None:
                continue
            try:
                self.store.barrier(entry.epoch_id)
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
            if self.store.metadata(entry.epoch_id) is not None:
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
        reg = self.store.registry()
        finished = False
        for entry in reg.open:
            meta = self.store.metadata(entry.epoch_id)
            if meta is None:
                continue
            self.finisher.finish(meta, self.store.barrier_or_none(entry.epoch_id))
            finished = True
        return self.store.registry() if finished else reg

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
                        self.store.pipeline_id, epoch_id, reason, detail, missing or "none")
            self.finisher.finish(meta, barrier)
            self._report_decision(meta, barrier, last)
            if (on_abort := self.on_abort) is not None:
                try:
                    on_abort(meta, barrier)
                except Exception:  # an alert channel failing must not undo the abort
                    log.exception("abort listener failed for epoch %d", epoch_id)
        return meta, ours

    def _open_lineage(self, epoch_id: int) -> str:
        entry = self.store.registry().open_entry(epoch_id)
        return entry.lineage if entry else MAIN

    def _last_completed_at(self, lineage: str) -> str | None:
        """When the lineage's latest completed epoch was decided (for the listener's age
        figure); read only when a listener is attached."""
        if not self.listener.reports:
            return None
        try:  # a figure for the listener: never a reason for the decision to fail
            latest = self.store.registry().lineage(lineage).latest_completed
            meta = self.store.metadata(latest) if latest else None
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
                handles[task] = self.store.read_ack(ref.key).state_handle
            except CheckpointError:
                continue
        self.listener.epoch_decided(meta, barrier, handles, last_completed_at)
