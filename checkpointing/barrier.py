"""The barrier: an epoch's plan, written once before any task snapshots (Flink's
CheckpointPlan + CheckpointBarrier)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .codec import Codec
from .config import CheckpointConfig
from .ids import validate_id

FORMAT = "ckpt.barrier"


@dataclass(frozen=True)
class TaskPlan:
    """One task that must acknowledge: its upstream edges and whether it publishes."""

    upstream: tuple[str, ...] = ()
    publishes: bool = False


def plan_to_json(plan: dict[str, TaskPlan]) -> dict[str, dict[str, Any]]:
    """A plan as the barrier writes it (PROTOCOL 5.2)."""
    return {t: {"upstream": list(p.upstream), "publishes": p.publishes} for t, p in plan.items()}


def plan_from_json(doc: dict[str, Any]) -> dict[str, TaskPlan]:
    """The inverse of :func:`plan_to_json` (absent fields take their defaults)."""
    return {t: TaskPlan(tuple(p.get("upstream") or ()), bool(p.get("publishes", False)))
            for t, p in doc.items()}


def plan_from_edges(tasks: dict[str, list[str] | tuple[str, ...]],
                    publishes: set[str] | frozenset[str] = frozenset()) -> dict[str, TaskPlan]:
    """Build a plan from ``{task: [upstream tasks]}``, checking ids and edges."""
    plan = {}
    for task, ups in tasks.items():
        validate_id(task, "task id")
        for up in ups:
            if up not in tasks:
                raise ValueError(f"task {task!r} has upstream {up!r} that is not in the plan")
        plan[task] = TaskPlan(tuple(ups), task in publishes)
    unknown = set(publishes) - set(tasks)
    if unknown:
        raise ValueError(f"publishing task(s) not in the plan: {sorted(unknown)}")
    return plan


@dataclass(frozen=True)
class Barrier:
    """The immutable plan of one epoch."""

    pipeline_id: str
    epoch_id: int
    run_id: str
    lineage: str
    plan: dict[str, TaskPlan]
    created_at: str
    deadline: str
    config: CheckpointConfig
    mode: str
    data_interval: dict[str, str] | None = None
    input_range: Any = None
    parent_epoch_id: int | None = None
    parent_savepoint: str | None = None
    publish_on_complete: bool = True
    writer: dict[str, Any] = field(default_factory=dict)
    #: completed epochs begin skipped because their files failed verification (1.2)
    restore_fallback: tuple[dict[str, Any], ...] = ()
    #: a backfill's last epoch that continues the main line when it completes (1.4)
    promote: bool = False

    @property
    def input_until(self) -> str | None:
        """The day (YYYY-MM-DD) before which the epoch's input stops: its data interval's
        end; None without an interval."""
        end = (self.data_interval or {}).get("end")
        return str(end)[:10] if end else None

    def to_bytes(self) -> bytes:
        return CODEC.encode(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline_id": self.pipeline_id,
            "epoch_id": self.epoch_id,
            "run_id": self.run_id,
            "lineage": self.lineage,
            "plan": plan_to_json(self.plan),
            "created_at": self.created_at,
            "deadline": self.deadline,
            "config": self.config.to_json(),
            "mode": self.mode,
            "data_interval": self.data_interval,
            "input_range": self.input_range,
            "parent_epoch_id": self.parent_epoch_id,
            "parent_savepoint": self.parent_savepoint,
            "publish_on_complete": self.publish_on_complete,
            "writer": self.writer,
            "restore_fallback": list(self.restore_fallback),
            "promote": self.promote,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], key: str = "barrier") -> Barrier:
        return CODEC.parse(doc, key)

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> Barrier:
        return CODEC.decode(data, key)


def _build(doc: dict[str, Any], key: str) -> Barrier:
    return Barrier(
        pipeline_id=doc["pipeline_id"], epoch_id=int(doc["epoch_id"]),
        run_id=doc["run_id"], lineage=doc["lineage"], plan=plan_from_json(doc["plan"]),
        created_at=doc["created_at"], deadline=doc["deadline"],
        config=CheckpointConfig.from_json(doc.get("config", {})),
        mode=doc.get("mode", "exactly_once"),
        data_interval=doc.get("data_interval"), input_range=doc.get("input_range"),
        parent_epoch_id=doc.get("parent_epoch_id"),
        parent_savepoint=doc.get("parent_savepoint"),
        publish_on_complete=bool(doc.get("publish_on_complete", True)),
        writer=doc.get("writer", {}),
        restore_fallback=tuple(doc.get("restore_fallback") or ()),
        promote=bool(doc.get("promote", False)),
    )


#: Also the codec of the barrier a savepoint embeds.
CODEC = Codec(FORMAT, "barrier", ("pipeline_id", "epoch_id", "run_id", "lineage", "plan",
                                  "created_at", "deadline"), _build)
