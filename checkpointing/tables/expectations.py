"""Missing table input is news (PROTOCOL 6.14, 1.14): a table input declared with
``expect_new_version`` expects, in every epoch of the main line, a version newer than the one
the parent epoch read; an upstream that committed nothing is missing input, as a day's file
that never landed is, not an epoch with nothing new.

Two checks, one rule (newer than the parent's pin): before an epoch begins, what its begin
would still wait for (:func:`awaited_versions`, then :meth:`AwaitedVersion.met_by` against
the table's newest version), so that the caller can wait for the commit before the barrier
pins the version; and once it began, which of a task's inputs its barrier pinned unchanged
(:func:`unchanged_inputs`), which the task declines. The second check reads only the two
barriers, so every attempt of the epoch reaches the same answer, however late it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from checkpointing.errors import EpochNotFound
from checkpointing.ids import validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.barrier import Barrier, TaskPlan, plan_table_inputs
from checkpointing.protocol.epoch_reader import EpochReader
from checkpointing.protocol.registry import MAIN
from checkpointing.protocol.table_inputs import TableInput, TableVersion


@dataclass(frozen=True)
class AwaitedVersion:
    """A table input whose next epoch expects a version newer than ``last``."""

    name: str
    spec: TableInput
    #: the version the parent epoch read up to
    last: int

    def met_by(self, version: TableVersion | None) -> bool:
        return version is not None and version.version > self.last

    def wanted(self) -> str:
        """What is awaited, naming the table without its storage path."""
        return f"a version of table {self.spec.label!r} newer than {self.last}"

    def describe(self, found: TableVersion | None) -> str:
        """One line, naming the table without its storage path."""
        now = "none" if found is None else str(found.version)
        return (f"table {self.spec.label!r} (input {self.name!r}) has no version newer than "
                f"{self.last} (its newest: {now})")

    def to_json(self) -> JsonObject:
        return {"name": self.name, "input": self.spec.to_json(), "last": self.last}

    @classmethod
    def from_json(cls, d: JsonObject) -> AwaitedVersion:
        return cls(str(d["name"]), TableInput.from_json(dict(d["input"])), int(d["last"]))


def awaited_versions(plan: Mapping[str, TaskPlan],
                     parent_versions: Mapping[str, TableVersion]) -> list[AwaitedVersion]:
    """The inputs of ``plan`` that expect a new version, with the version the parent epoch
    pinned (``parent_versions``, its barrier's ``table_versions``). An input the parent did
    not pin (new in the plan) expects nothing yet: any version is new to it."""
    found = []
    for name, spec in sorted(plan_table_inputs(dict(plan)).items()):
        last = parent_versions.get(name)
        if spec.expect_new_version and last is not None:
            found.append(AwaitedVersion(name, spec, last.version))
    return found


def unchanged_inputs(plan: Mapping[str, TaskPlan], task_id: str,
                     pinned: Mapping[str, TableVersion],
                     parent_versions: Mapping[str, TableVersion]) -> list[str]:
    """One line per table input of ``task_id`` expecting a new version whose pin
    (``pinned``) is not newer than its parent's; empty when every expectation is met."""
    own = {task_id: plan[task_id]} if task_id in plan else {}
    lines = []
    for awaited in awaited_versions(own, parent_versions):
        version = pinned.get(awaited.name)
        if not awaited.met_by(version):
            lines.append(awaited.describe(version))
    return lines


def awaited_table_versions(epochs: EpochReader, plan: Mapping[str, TaskPlan],
                           lineage: str = MAIN) -> list[AwaitedVersion]:
    """What an epoch of ``plan`` beginning now in ``lineage`` expects of its table inputs
    (PROTOCOL 6.14, 1.14): for each declared with ``expect_new_version``, a version newer
    than the latest completed epoch pinned. Main only: a backfill's epochs have no data
    interval on a table to expect anything of."""
    validate_id(lineage, "lineage")
    if lineage != MAIN or not any(s.expect_new_version for s in
                                  plan_table_inputs(dict(plan)).values()):
        return []
    last = epochs.latest_completed(lineage)
    parent = _barrier_or_none(epochs, last)
    return awaited_versions(plan, parent.table_versions) if parent is not None else []


def unchanged_table_inputs(epochs: EpochReader, epoch_id: int, task_id: str) -> list[str]:
    """One line per table input of ``task_id`` expecting a new version that the epoch's
    barrier pinned no newer than its parent epoch's (the task declines the epoch); empty
    when every expectation is met, or outside main, or without a parent epoch."""
    barrier = epochs.barrier(epoch_id)
    if barrier.lineage != MAIN or barrier.parent_epoch_id is None:
        return []
    parent = _barrier_or_none(epochs, barrier.parent_epoch_id)
    if parent is None:
        return []
    return unchanged_inputs(barrier.plan, task_id, barrier.table_versions,
                            parent.table_versions)


def _barrier_or_none(epochs: EpochReader, epoch_id: int | None) -> Barrier | None:
    if epoch_id is None:
        return None
    try:
        return epochs.barrier(epoch_id)
    except EpochNotFound:  # deleted by retention
        return None
