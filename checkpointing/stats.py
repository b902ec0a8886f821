"""Epoch statistics (what Flink's checkpoint statistics page shows)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .attempts import scan_epoch_tasks
from .documents import parse_iso


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
    row_counts: dict[str, int] = field(default_factory=dict)


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def epoch_stats(coordinator, epoch_id: int, per_task: bool = True) -> EpochStats:  # noqa: ANN001
    """Statistics of one epoch; ``per_task`` reads every acknowledgement."""
    barrier = coordinator.barrier(epoch_id)
    meta = coordinator.metadata(epoch_id)
    created = parse_iso(barrier.created_at)
    tasks = scan_epoch_tasks(coordinator.storage, coordinator.layout, epoch_id)
    stats = EpochStats(
        epoch_id=epoch_id, run_id=barrier.run_id, lineage=barrier.lineage,
        status=meta.status if meta else "pending", created_at=barrier.created_at,
        decided_at=meta.decided_at if meta else None,
        duration_ms=round((parse_iso(meta.decided_at) - created) * 1000, 1) if meta else None,
        tasks_total=len(barrier.plan), tasks_acked=0, state_bytes=0, bytes_written=0,
        parent_epoch_id=barrier.parent_epoch_id,
        reason=meta.reason if meta else None, detail=meta.detail if meta else None,
    )
    for task in barrier.plan:
        ta = tasks.get(task)
        eff = ta.effective_ack if ta else None
        ts = TaskStats(task, "pending", ta.highest if ta else 0)
        if ta and ta.declines:
            ts.status = "declined"
        if eff is not None:
            stats.tasks_acked += 1
            ts.status, ts.acked_attempt = "acked", eff[0]
            if per_task:
                ack = coordinator.read_ack(eff[1].key)
                h = ack.state_handle
                ts.acked_at = ack.acked_at
                ts.ack_delay_ms = round((parse_iso(ack.acked_at) - created) * 1000, 1)
                ts.state_bytes, ts.bytes_written = h.state_size, h.bytes_written
                ts.sync_ms, ts.async_ms = h.timings.get("sync_ms"), h.timings.get("async_ms")
                ts.row_counts = dict(h.row_counts)
                stats.state_bytes += h.state_size
                stats.bytes_written += h.bytes_written
        stats.tasks.append(ts)
    return stats
