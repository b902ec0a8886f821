"""Pinning the versions of an epoch's table inputs at its barrier (PROTOCOL 6.14).

Flink's sources snapshot their offsets when the barrier passes them; here the barrier is
written before any task runs, so it records, for every table input of the plan, the newest
version of the table at that moment. Every task and every retry of the epoch reads up to
exactly that version, whatever is committed to the upstream table meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from checkpointing.protocol.barrier import TaskPlan, plan_table_inputs
from checkpointing.protocol.table_formats import traits
from checkpointing.protocol.table_inputs import TableInput, TableInputError, TableVersion
from checkpointing.tables.changes import pin
from checkpointing.tables.metastore import MetastoreNames, TableNames


class TablePins:
    """Pins the table inputs of a plan; ``read`` (injectable) reads a table's newest
    version, ``names`` where a Delta input named in Spark's catalog lives (by default the
    metastore CKPT_METASTORE_URL names, read only for a plan with such an input)."""

    def __init__(self, endpoint_url: str | None = None,
                 read: Callable[[TableInput, str | None], TableVersion] = pin,
                 names: TableNames | None = None):
        self.endpoint_url = endpoint_url
        self.read = read
        self.names = names

    def resolve(self, plan: Mapping[str, TaskPlan]) -> dict[str, TaskPlan]:
        """The plan with each Delta input named in Spark's catalog given the location the
        name has now: the barrier records it, and every attempt of the epoch reads that
        table (PROTOCOL 6.14, 1.19)."""
        named = {name: spec for name, spec in plan_table_inputs(dict(plan)).items()
                 if spec.name and not traits(spec.format).catalog_named
                 and spec.location is None}
        if not named:
            return dict(plan)
        names = self.names or MetastoreNames.from_env()
        found = {name: names.location_of(spec.name or "") for name, spec in named.items()}
        return {task: replace(p, table_inputs={
                    n: replace(s, location=found[n]) if n in found else s
                    for n, s in p.table_inputs.items()})
                for task, p in plan.items()}

    def newest(self, spec: TableInput) -> TableVersion:
        """Table ``spec``'s newest version, read as :meth:`pin_all` reads it."""
        return self.read(spec, self.endpoint_url)

    def pin_all(self, plan: Mapping[str, TaskPlan],
                min_versions: Mapping[str, int] | None = None) -> dict[str, TableVersion]:
        """``{input name: version}`` for the barrier; refuses a table older than the
        version an asset event announced (a stale replica or a recreated table)."""
        pins: dict[str, TableVersion] = {}
        for name, spec in sorted(plan_table_inputs(dict(plan)).items()):
            version = self.newest(spec)
            least = (min_versions or {}).get(name)
            if least is not None and version.version < least:
                raise TableInputError(
                    f"table input {name!r}: the run was triggered by version {least} of "
                    f"table {spec.label!r}, but the table's newest version is "
                    f"{version.version}")
            pins[name] = version
        return pins
