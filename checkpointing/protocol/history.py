"""Failure history (Flink's checkpoint history of failed checkpoints): a small record of
every aborted epoch that outlives the epoch's files (PROTOCOL 5.12, 6.9).

Retention deletes an aborted epoch's files soon after the abort; an operator still needs to
see that it failed, why, which tasks failed or never acknowledged, with which attempts, and
the alert that went out. The record is written create-once by the process that decides the
abort and, if that process died first, by retention just before it deletes the epoch. The
newest ``CheckpointConfig.failure_history`` records are kept; older ones are pruned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpointing.errors import PreconditionFailed
from checkpointing.json_types import JsonObject
from checkpointing.protocol.attempts import TaskAttempts, scan_epoch_tasks
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import writer_identity
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.layout import Layout
from checkpointing.storage import Storage

FORMAT = "ckpt.failure"


@dataclass(frozen=True)
class TaskOutcome:
    """What one planned task did in a failed epoch."""

    status: str  # acked | declined | not_acked
    attempts: int
    acked_attempt: int | None = None


@dataclass(frozen=True)
class FailureRecord:
    """An aborted epoch, as it stays visible after retention deleted its files."""

    epoch_id: int
    run_id: str | None
    lineage: str
    reason: str
    detail: str
    missing_tasks: tuple[str, ...]
    declined_by: str | None
    created_at: str | None
    deadline: str | None
    decided_at: str
    parent_epoch_id: int | None
    data_interval: dict[str, str] | None
    tasks: dict[str, TaskOutcome] = field(default_factory=dict)

    @classmethod
    def build(cls, meta: EpochMetadata, barrier: Barrier | None,
              attempts: dict[str, TaskAttempts]) -> FailureRecord:
        plan = list(barrier.plan) if barrier else sorted(attempts)
        tasks = {}
        for task in plan:
            ta = attempts.get(task, TaskAttempts(task))
            eff = ta.effective_ack
            status = "acked" if eff else "declined" if ta.declines else "not_acked"
            tasks[task] = TaskOutcome(status, ta.highest, eff[0] if eff else None)
        return cls(meta.epoch_id, barrier.run_id if barrier else None, meta.lineage,
                   meta.reason or "aborted", meta.detail or "", tuple(meta.missing_tasks),
                   meta.declined_by, barrier.created_at if barrier else None,
                   barrier.deadline if barrier else None, meta.decided_at,
                   barrier.parent_epoch_id if barrier else None,
                   barrier.data_interval if barrier else None, tasks)

    def to_json(self) -> JsonObject:
        return {"epoch_id": self.epoch_id, "run_id": self.run_id, "lineage": self.lineage,
                "status": "aborted", "reason": self.reason, "detail": self.detail,
                "missing_tasks": list(self.missing_tasks), "declined_by": self.declined_by,
                "created_at": self.created_at, "deadline": self.deadline,
                "decided_at": self.decided_at, "parent_epoch_id": self.parent_epoch_id,
                "data_interval": self.data_interval,
                "tasks": {t: {"status": o.status, "attempts": o.attempts,
                              "acked_attempt": o.acked_attempt}
                          for t, o in self.tasks.items()}}

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> FailureRecord:
        return CODEC.decode(data, key)


def _build(d: JsonObject, key: str) -> FailureRecord:
    tasks = {t: TaskOutcome(str(o["status"]), int(o["attempts"]),
                            None if o.get("acked_attempt") is None else int(o["acked_attempt"]))
             for t, o in d["tasks"].items()}
    return FailureRecord(int(d["epoch_id"]), d.get("run_id"), d["lineage"], d["reason"],
                         d.get("detail") or "", tuple(d.get("missing_tasks") or ()),
                         d.get("declined_by"), d.get("created_at"), d.get("deadline"),
                         d["decided_at"], d.get("parent_epoch_id"), d.get("data_interval"),
                         tasks)


CODEC = Codec(FORMAT, "failure record", ("epoch_id", "lineage", "reason", "decided_at", "tasks"),
              _build)


def record_failure(storage: Storage, layout: Layout, meta: EpochMetadata,
                   barrier: Barrier | None) -> bool:
    """Write the failure record of an aborted epoch unless one exists; True if written."""
    if meta.completed:
        return False
    key = layout.failure_record(meta.epoch_id)
    if storage.exists(key):
        return False
    rec = FailureRecord.build(meta, barrier, scan_epoch_tasks(storage, layout, meta.epoch_id))
    try:
        storage.create(key, CODEC.encode({**rec.to_json(), "writer": writer_identity()}))
    except PreconditionFailed:
        return False
    return True


def read_failure(storage: Storage, layout: Layout, epoch_id: int) -> FailureRecord | None:
    key = layout.failure_record(epoch_id)
    data = storage.read_optional(key)
    return None if data is None else FailureRecord.from_bytes(data, storage.uri(key))


def history_ids(storage: Storage, layout: Layout) -> list[int]:
    """Epoch ids that have a history entry (failure record and/or alert), ascending."""
    ids = (layout.parse_history_dir(p) for p in storage.list_dirs(layout.history_prefix))
    return sorted(i for i in ids if i)


def prune_history(storage: Storage, layout: Layout, keep: int,
                  protect: set[int] | frozenset[int] = frozenset(),
                  dry_run: bool = False, keep_summaries: int = 0) -> list[int]:
    """Delete the history entries of all but the newest ``keep`` failed epochs and the
    newest ``keep_summaries`` completed ones (5.19); entries of epochs in ``protect``,
    whose files still exist, are not counted nor deleted. One listing of the history."""
    entries: dict[int, list[str]] = {}
    for obj in storage.list(layout.history_prefix):
        epoch_id = layout.parse_history_dir(obj.key.rsplit("/", 1)[0] + "/")
        if epoch_id and epoch_id not in protect:
            entries.setdefault(epoch_id, []).append(obj.key)
    completed = sorted(i for i, keys in entries.items()
                       if keys == [layout.kept_summary(i)])
    failed = sorted(i for i in entries if i not in completed)
    kept = set(failed[-keep:] if keep > 0 else ()) | \
        set(completed[-keep_summaries:] if keep_summaries > 0 else ())
    doomed = sorted(i for i in entries if i not in kept)
    if not dry_run:
        for epoch_id in doomed:
            for key in entries[epoch_id]:
                storage.delete(key)
    return doomed
