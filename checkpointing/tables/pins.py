"""Pinning the versions of an epoch's table inputs at its barrier (PROTOCOL 6.14).

Flink's sources snapshot their offsets when the barrier passes them; here the barrier is
written before any task runs, so it records, for every table input of the plan, the newest
version of the table at that moment. Every task and every retry of the epoch reads up to
exactly that version, whatever is committed to the upstream table meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from checkpointing.json_types import JsonObject
from checkpointing.protocol.barrier import TaskPlan, plan_table_inputs
from checkpointing.protocol.table_inputs import TableInput, TableInputError, TableVersion
from checkpointing.tables.changes import pin


class TablePins:
    """Pins the table inputs of a plan; ``read`` (injectable) reads a table's newest
    version."""

    def __init__(self, endpoint_url: str | None = None,
                 read: Callable[[TableInput, str | None], TableVersion] = pin):
        self.endpoint_url = endpoint_url
        self.read = read

    def pin_all(self, plan: Mapping[str, TaskPlan],
                min_versions: Mapping[str, int] | None = None) -> dict[str, JsonObject]:
        """``{input name: version}`` for the barrier; refuses a table older than the
        version an asset event announced (a stale replica or a recreated table)."""
        pins: dict[str, JsonObject] = {}
        for name, spec in sorted(plan_table_inputs(dict(plan)).items()):
            version = self.read(spec, self.endpoint_url)
            least = (min_versions or {}).get(name)
            if least is not None and version.version < least:
                raise TableInputError(
                    f"table input {name!r}: the run was triggered by version {least} of "
                    f"table {spec.label!r}, but the table's newest version is "
                    f"{version.version}")
            pins[name] = version.to_json()
        return pins
