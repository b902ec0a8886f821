"""Task attempts within an epoch and the fencing rule (PROTOCOL 6.3).

For a task, the highest attempt is the largest attempt number among its start, ack and
decline objects; its effective acknowledgement is the ack of that highest attempt. An older
attempt's ack never counts, even if it raced past the check that refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpointing.protocol.layout import Layout
from checkpointing.storage import ObjectInfo, Storage


@dataclass
class TaskAttempts:
    """What storage holds for one task in one epoch."""

    task_id: str
    starts: set[int] = field(default_factory=set)
    acks: dict[int, ObjectInfo] = field(default_factory=dict)
    declines: dict[int, ObjectInfo] = field(default_factory=dict)
    #: operation records (PROTOCOL 5.17): hints, not registrations; never fence
    operations: dict[int, ObjectInfo] = field(default_factory=dict)

    @property
    def highest(self) -> int:
        return max([*self.starts, *self.acks, *self.declines], default=0)

    def resumable_operation(self, attempt: int) -> ObjectInfo | None:
        """The operation record an ``attempt`` may resume (PROTOCOL 6.3): that of the
        highest lower attempt that neither acknowledged nor declined, if it left one."""
        lower = [a for a in self.operations if a < attempt
                 and a not in self.acks and a not in self.declines]
        return self.operations[max(lower)] if lower else None

    @property
    def effective_ack(self) -> tuple[int, ObjectInfo] | None:
        h = self.highest
        return (h, self.acks[h]) if h in self.acks else None


def _collect(infos: list[ObjectInfo], into: dict[str, TaskAttempts]) -> None:
    for info in infos:
        parsed = Layout.parse_attempt_object(info.key)
        if parsed is None:
            continue
        task, attempt, kind = parsed
        ta = into.setdefault(task, TaskAttempts(task))
        if kind == "start":
            ta.starts.add(attempt)
        elif kind == "ack":
            ta.acks[attempt] = info
        elif kind == "operation":
            ta.operations[attempt] = info
        else:
            ta.declines[attempt] = info


def scan_epoch_tasks(storage: Storage, layout: Layout, epoch_id: int) -> dict[str, TaskAttempts]:
    """All tasks' attempts in the epoch, from one listing (one request per 1,000 objects)."""
    out: dict[str, TaskAttempts] = {}
    _collect(list(storage.list(layout.tasks_prefix(epoch_id))), out)
    return out


def scan_task(storage: Storage, layout: Layout, epoch_id: int, task_id: str) -> TaskAttempts:
    """One task's attempts in the epoch, from one listing."""
    out: dict[str, TaskAttempts] = {}
    _collect(list(storage.list(layout.task_prefix(epoch_id, task_id))), out)
    return out.get(task_id, TaskAttempts(task_id))
