"""Epoch statistics (what Flink's checkpoint statistics page shows)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from checkpointing.errors import EpochNotFound, EpochNotKept, MalformedDocument
from checkpointing.json_types import JsonObject
from checkpointing.protocol.attempts import scan_epoch_tasks
from checkpointing.protocol.barrier import TaskPlan
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import parse_iso
from checkpointing.protocol.epoch_reader import EpochReader
from checkpointing.protocol.history import FailureRecord, read_failure
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.table_inputs import versions_to_json
from checkpointing.storage import Storage


@dataclass
class TaskStats:
    task_id: str
    status: str  # acked | pending | declined
    attempts: int
    acked_attempt: int | None = None
    acked_at: str | None = None
    ack_delay_ms: float | None = None  # from the barrier to the ack
    state_bytes: int = 0
    bytes_written: int = 0
    sync_ms: float | None = None
    async_ms: float | None = None
    #: when the acknowledged attempt started (its handle's ``timings.started_at``) and
    #: how long it took to its acknowledgement; restore and run phases within it
    started_at: str | None = None
    started_delay_ms: float | None = None
    restore_ms: float | None = None
    run_ms: float | None = None
    row_counts: dict[str, int] = field(default_factory=dict)
    #: the epoch the acknowledged attempt restored its state from (None: empty state)
    restored_from: int | None = None
    #: the acknowledged handle's metrics: the job's own, and the runtime's (among them
    #: ``table_inputs``: per table input, the range of versions this task consumed)
    metrics: JsonObject = field(default_factory=dict)


@dataclass
class EpochStats:
    epoch_id: int
    run_id: str
    lineage: str
    status: str
    created_at: str
    decided_at: str | None
    duration_ms: float | None
    tasks_total: int
    tasks_acked: int
    state_bytes: int
    bytes_written: int
    parent_epoch_id: int | None
    reason: str | None = None
    detail: str | None = None
    tasks: list[TaskStats] = field(default_factory=list)
    missing_tasks: list[str] = field(default_factory=list)
    declined_by: str | None = None
    #: the run's logical date (the barrier's input range), when the run had one
    logical_date: str | None = None
    #: where the row comes from: the epoch's own documents, or its failure record or kept
    #: summary after retention deleted its files ("history"), or neither ("damaged")
    source: str = "epoch"
    #: per table input, the version the barrier pinned (PROTOCOL 6.14)
    table_pins: dict[str, JsonObject] = field(default_factory=dict)
    #: per table output, the table version the epoch committed (kept summaries only: for
    #: an epoch with files, the manifest's history says it)
    tables: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, d: JsonObject) -> EpochStats:
        """The inverse of :meth:`to_json` (unknown fields of a newer writer are ignored)."""
        known = {f.name for f in fields(cls)} - {"tasks"}
        task_fields = {f.name for f in fields(TaskStats)}
        return cls(**{k: v for k, v in d.items() if k in known},
                   tasks=[TaskStats(**{k: v for k, v in t.items() if k in task_fields})
                          for t in d.get("tasks") or ()])


SUMMARY_FORMAT = "ckpt.epoch-summary"
#: an epoch's summary (5.7), and the one retention keeps of a completed epoch (5.19)
SUMMARY_CODEC = Codec(SUMMARY_FORMAT, "summary", ("stats",),
                      lambda d, key: EpochStats.from_json(d["stats"]))


def read_kept_summary(storage: Storage, layout: Layout, epoch_id: int) -> EpochStats | None:
    """The summary retention kept of a completed epoch whose files it deleted (5.19), or
    None; MalformedDocument (naming its key) for one that is not a summary."""
    key = layout.kept_summary(epoch_id)
    data = storage.read_optional(key)
    if data is None:
        return None
    stats = SUMMARY_CODEC.decode(data, storage.uri(key))
    return stats if stats.epoch_id == epoch_id else None


def dag_order(plan: dict[str, TaskPlan]) -> list[str]:
    """The plan's tasks upstream first (Kahn's order, ties by name): as the DAG runs them."""
    left = {t: set(p.upstream) & set(plan) for t, p in plan.items()}
    order: list[str] = []
    while left:
        ready = sorted(t for t, ups in left.items() if not ups) or sorted(left)[:1]
        for t in ready:
            order.append(t)
            del left[t]
        for ups in left.values():
            ups.difference_update(ready)
    return order


def epoch_stats(epochs: EpochReader, epoch_id: int, per_task: bool = True) -> EpochStats:
    """Statistics of one epoch; ``per_task`` reads every acknowledgement."""
    barrier = epochs.barrier(epoch_id)
    meta = epochs.metadata(epoch_id)
    if meta is None and epochs.decision(epoch_id, metadata_absent=True) is not None:
        # Decided and deleted (6.11): a barrier this process cached earlier must not turn
        # it back into "pending"; its failure record describes it.
        raise EpochNotKept(f"epoch {epoch_id} was decided and deleted by retention")
    created = parse_iso(barrier.created_at)
    tasks = scan_epoch_tasks(epochs.storage, epochs.layout, epoch_id)
    stats = EpochStats(
        epoch_id=epoch_id, run_id=barrier.run_id, lineage=barrier.lineage,
        status=meta.status if meta else "pending", created_at=barrier.created_at,
        decided_at=meta.decided_at if meta else None,
        duration_ms=round((parse_iso(meta.decided_at) - created) * 1000, 1) if meta else None,
        tasks_total=len(barrier.plan), tasks_acked=0, state_bytes=0, bytes_written=0,
        parent_epoch_id=barrier.parent_epoch_id,
        reason=meta.reason if meta else None, detail=meta.detail if meta else None,
        missing_tasks=list(meta.missing_tasks) if meta else [],
        declined_by=meta.declined_by if meta else None,
        logical_date=_logical_date(barrier.input_range, barrier.data_interval),
        table_pins=versions_to_json(barrier.table_versions),
    )
    for task in dag_order(barrier.plan):
        ta = tasks.get(task)
        eff = ta.effective_ack if ta else None
        ts = TaskStats(task, "pending", ta.highest if ta else 0)
        if ta and ta.declines:
            ts.status = "declined"
        if eff is not None:
            stats.tasks_acked += 1
            ts.status, ts.acked_attempt = "acked", eff[0]
            if per_task:
                ack = epochs.read_ack(eff[1].key)
                h = ack.state_handle
                ts.acked_at = ack.acked_at
                ts.ack_delay_ms = round((parse_iso(ack.acked_at) - created) * 1000, 1)
                ts.state_bytes, ts.bytes_written = h.state_size, h.bytes_written
                ts.sync_ms, ts.async_ms = h.timings.get("sync_ms"), h.timings.get("async_ms")
                ts.restore_ms, ts.run_ms = h.timings.get("restore_ms"), h.timings.get("run_ms")
                started = h.timings.get("started_at")  # an ISO time among the timings
                ts.started_at = str(started) if started is not None else None
                if ts.started_at:
                    ts.started_delay_ms = round((parse_iso(ts.started_at) - created) * 1000, 1)
                ts.row_counts = dict(h.row_counts)
                ts.restored_from = (h.restored_from or {}).get("epoch_id")
                ts.metrics = dict(h.metrics)
                stats.state_bytes += h.state_size
                stats.bytes_written += h.bytes_written
        stats.tasks.append(ts)
    return stats


def _logical_date(input_range: object, data_interval: object) -> str | None:
    value = input_range.get("logical_date") if isinstance(input_range, dict) else None
    if value in (None, "None") and isinstance(data_interval, dict):
        value = data_interval.get("end")
    return None if value in (None, "None") else str(value)


def failure_stats(rec: FailureRecord) -> EpochStats:
    """The statistics row of a failed epoch whose files retention deleted."""
    created = parse_iso(rec.created_at) if rec.created_at else None
    return EpochStats(
        epoch_id=rec.epoch_id, run_id=rec.run_id or "", lineage=rec.lineage,
        status="aborted", created_at=rec.created_at or "", decided_at=rec.decided_at,
        duration_ms=None if created is None else
        round((parse_iso(rec.decided_at) - created) * 1000, 1),
        tasks_total=len(rec.tasks),
        tasks_acked=sum(1 for o in rec.tasks.values() if o.status == "acked"),
        state_bytes=0, bytes_written=0, parent_epoch_id=rec.parent_epoch_id,
        reason=rec.reason, detail=rec.detail, missing_tasks=list(rec.missing_tasks),
        declined_by=rec.declined_by, source="history",
        logical_date=_logical_date(None, rec.data_interval),
        tasks=[TaskStats(t, o.status, o.attempts, o.acked_attempt)
               for t, o in rec.tasks.items()])


def damaged_stats(epoch_id: int, problem: str) -> EpochStats:
    """A row for an epoch whose documents are missing or unreadable: shown, not hidden."""
    return EpochStats(epoch_id=epoch_id, run_id="", lineage="", status="damaged",
                      created_at="", decided_at=None, duration_ms=None, tasks_total=0,
                      tasks_acked=0, state_bytes=0, bytes_written=0, parent_epoch_id=None,
                      detail=problem, source="damaged")


def any_epoch_stats(epochs: EpochReader, epoch_id: int,
                    per_task: bool = True, has_files: bool = True) -> EpochStats:
    """Statistics of any listed epoch: from its documents, else from its kept summary or
    failure record, else a ``damaged`` row naming the problem. Never raises for a missing
    document. ``has_files`` False (the epoch's directory is gone): its history only, never
    documents this process cached before another deleted them (a barrier and a decision
    without the acknowledgements would read as a completed epoch with none)."""
    problem = f"epoch {epoch_id} was deleted by retention"
    try:
        if has_files:
            return epoch_stats(epochs, epoch_id, per_task)
    except (EpochNotFound, MalformedDocument) as exc:
        problem = str(exc)
    try:
        kept = read_kept_summary(epochs.storage, epochs.layout, epoch_id)
        if kept is not None:
            return kept
        rec = read_failure(epochs.storage, epochs.layout, epoch_id)
    except MalformedDocument as exc:
        return damaged_stats(epoch_id, f"{problem}; {exc}")
    return failure_stats(rec) if rec is not None else damaged_stats(epoch_id, problem)


def epoch_or_history_stats(epochs: EpochReader, epoch_id: int,
                           per_task: bool = True) -> EpochStats:
    """One epoch's statistics, from its kept summary or failure record once retention
    deleted it. Raises for a malformed document (refused, not papered over) and for an
    unknown epoch."""
    try:
        return epoch_stats(epochs, epoch_id, per_task)
    except EpochNotFound as missing:
        kept = read_kept_summary(epochs.storage, epochs.layout, epoch_id)
        if kept is not None:
            return kept
        rec = read_failure(epochs.storage, epochs.layout, epoch_id)
        if rec is None:
            if isinstance(missing, EpochNotKept):
                raise EpochNotKept(
                    f"epoch {epoch_id} of pipeline {epochs.pipeline_id!r} is beyond the kept "
                    "history: retention deleted its files, and epoch_history keeps no "
                    "record this old") from None
            raise
        return failure_stats(rec)
