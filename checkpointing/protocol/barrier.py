"""The barrier: an epoch's plan, written once before any task snapshots (Flink's
CheckpointPlan + CheckpointBarrier)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpointing.config import CheckpointConfig
from checkpointing.ids import validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.table_inputs import (
    TableInput,
    TableVersion,
    versions_from_json,
    versions_to_json,
)
from checkpointing.protocol.view_task import ViewTask

FORMAT = "ckpt.barrier"


@dataclass(frozen=True)
class TaskPlan:
    """One task that must acknowledge: its upstream edges, whether it publishes, the
    upstream tables it reads incrementally (1.11: name -> :class:`TableInput`) and, for a
    view task (1.22), the view it maintains."""

    upstream: tuple[str, ...] = ()
    publishes: bool = False
    table_inputs: dict[str, TableInput] = field(default_factory=dict, hash=False)
    view: ViewTask | None = field(default=None, hash=False)


def plan_to_json(plan: dict[str, TaskPlan]) -> dict[str, JsonObject]:
    """A plan as the barrier writes it (PROTOCOL 5.2)."""
    out: dict[str, JsonObject] = {}
    for t, p in plan.items():
        out[t] = {"upstream": list(p.upstream), "publishes": p.publishes}
        if p.table_inputs:
            out[t]["table_inputs"] = {n: i.to_json() for n, i in p.table_inputs.items()}
        if p.view is not None:
            out[t]["view"] = p.view.to_json()
    return out


def plan_from_json(doc: JsonObject) -> dict[str, TaskPlan]:
    """The inverse of :func:`plan_to_json` (absent fields take their defaults)."""
    return {t: TaskPlan(tuple(p.get("upstream") or ()), bool(p.get("publishes", False)),
                        {n: TableInput.from_json(i)
                         for n, i in (p.get("table_inputs") or {}).items()},
                        ViewTask.from_json(p["view"]) if p.get("view") else None)
            for t, p in doc.items()}


def plan_table_inputs(plan: dict[str, TaskPlan]) -> dict[str, TableInput]:
    """Every table input of the plan by name; a name two tasks declare must name the same
    table (the barrier pins one version per name)."""
    found: dict[str, TableInput] = {}
    for task, p in plan.items():
        for name, spec in p.table_inputs.items():
            validate_id(name, "table input name")
            if found.setdefault(name, spec) != spec:
                raise ValueError(f"table input {name!r} of task {task!r} names another table "
                                 "than the same input of another task: give it a name of "
                                 "its own")
    return found


def plan_from_edges(tasks: Mapping[str, Sequence[str]],
                    publishes: Collection[str] = frozenset(),
                    table_inputs: Mapping[str, Mapping[str, TableInput]] | None = None,
                    views: Mapping[str, ViewTask] | None = None,
                    ) -> dict[str, TaskPlan]:
    """Build a plan from ``{task: [upstream tasks]}``, checking ids and edges;
    ``table_inputs``: ``{task: {input name: TableInput}}``; ``views``: ``{task: ViewTask}``
    for view tasks."""
    plan = {}
    for task, ups in tasks.items():
        validate_id(task, "task id")
        for up in ups:
            if up not in tasks:
                raise ValueError(f"task {task!r} has upstream {up!r} that is not in the plan")
        plan[task] = TaskPlan(tuple(ups), task in publishes,
                              dict((table_inputs or {}).get(task) or {}),
                              (views or {}).get(task))
    unknown = set(publishes) - set(tasks)
    if unknown:
        raise ValueError(f"publishing task(s) not in the plan: {sorted(unknown)}")
    plan_table_inputs(plan)
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
    writer: JsonObject = field(default_factory=dict)
    #: completed epochs begin skipped because their files failed verification (1.2)
    restore_fallback: tuple[JsonObject, ...] = ()
    #: a backfill's last epoch that continues the main line when it completes (1.4)
    promote: bool = False
    #: (1.11) the version each table input of the plan is read up to, pinned when the epoch
    #: began (PROTOCOL 6.14); in JSON ``{input name: {"version": int, "snapshot_id": int}}``
    table_versions: dict[str, TableVersion] = field(default_factory=dict)

    def table_version(self, name: str) -> TableVersion | None:
        """The pinned version of table input ``name`` (None: not an input of the plan)."""
        return self.table_versions.get(name)

    @property
    def input_until(self) -> str | None:
        """The day (YYYY-MM-DD) before which the epoch's input stops: its data interval's
        end; None without an interval."""
        end = (self.data_interval or {}).get("end")
        return str(end)[:10] if end else None

    def to_bytes(self) -> bytes:
        return CODEC.encode(self.to_json())

    def to_json(self) -> JsonObject:
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
            "table_versions": versions_to_json(self.table_versions),
        }

    @classmethod
    def from_json(cls, doc: JsonObject, key: str = "barrier") -> Barrier:
        return CODEC.parse(doc, key)

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> Barrier:
        return CODEC.decode(data, key)


def _build(doc: JsonObject, key: str) -> Barrier:
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
        table_versions=versions_from_json(doc.get("table_versions")),
    )


#: Also the codec of the barrier a savepoint embeds.
CODEC = Codec(FORMAT, "barrier", ("pipeline_id", "epoch_id", "run_id", "lineage", "plan",
                                  "created_at", "deadline"), _build)
