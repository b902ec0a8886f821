"""The triggers a task waits on, deferred, for the input it expects: its data day's files,
or new versions of its table inputs (see :mod:`dag_checkpoints.shared.expected_inputs`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from checkpointing.errors import CheckpointError
from checkpointing.tables.changes import pin
from checkpointing.tables.expectations import AwaitedVersion

from ..hooks.checkpoint import CheckpointHook
from ..shared.expected_inputs import missing_keys
from ..shared.settings import CheckpointSettings

#: the longest pause between two looks at the data root
MAX_POLL_SECONDS = 30.0


class _DeadlineTrigger(BaseTrigger):
    """Looks for what is awaited every ``poll_seconds`` until it is all there (fires
    ``{"status": "landed"}``) or ``deadline`` (epoch seconds) passes (fires ``{"status":
    "missing", ...}`` with what :meth:`look` last reported missing)."""

    def __init__(self, checkpoint: dict[str, Any], deadline: float,
                 poll_seconds: float = MAX_POLL_SECONDS):
        super().__init__()
        self.checkpoint = checkpoint
        self.deadline, self.poll_seconds = float(deadline), float(poll_seconds)

    async def look(self, settings: CheckpointSettings) -> dict[str, Any] | None:
        """What is still missing (the missing event's fields), None when nothing is."""
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = CheckpointSettings.from_kwargs(self.checkpoint)
        while True:
            missing = await self.look(settings)
            if missing is None:
                yield TriggerEvent({"status": "landed"})
                return
            left = self.deadline - time.time()
            if left <= 0:
                yield TriggerEvent({"status": "missing", **missing})
                return
            await asyncio.sleep(max(0.1, min(self.poll_seconds, left)))


class ExpectedInputTrigger(_DeadlineTrigger):
    """Fires ``{"status": "landed"}`` once every key exists under the DAG's data root, or
    ``{"status": "missing", "keys": [...]}`` when ``deadline`` (epoch seconds) passes
    first. Storage is read in a worker thread of the event loop, one listing at a time."""

    def __init__(self, checkpoint: dict[str, Any], keys: list[str], deadline: float,
                 poll_seconds: float = MAX_POLL_SECONDS):
        super().__init__(checkpoint, deadline, poll_seconds)
        self.keys = list(keys)
        self._data: Any = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.ExpectedInputTrigger",
                {"checkpoint": self.checkpoint, "keys": self.keys,
                 "deadline": self.deadline, "poll_seconds": self.poll_seconds})

    async def look(self, settings: CheckpointSettings) -> dict[str, Any] | None:
        if self._data is None:
            self._data = await asyncio.to_thread(CheckpointHook(settings).get_data_storage)
        try:
            self.keys = await asyncio.to_thread(missing_keys, self._data, self.keys)
        except CheckpointError as exc:  # a store down: look again, within the grace
            self.log.warning("expected input not checked: %s", exc)
        return {"keys": self.keys} if self.keys else None


class TableVersionTrigger(_DeadlineTrigger):
    """Fires ``{"status": "landed"}`` once every awaited table input (serialized
    :class:`~checkpointing.tables.expectations.AwaitedVersion`) has a version newer than the
    one its parent epoch read, or ``{"status": "missing", "lines": [...]}`` when
    ``deadline`` (epoch seconds) passes first. Each look reads the tables' logs (their
    newest version), in a worker thread of the event loop."""

    def __init__(self, checkpoint: dict[str, Any], awaited: list[dict[str, Any]],
                 deadline: float, poll_seconds: float = MAX_POLL_SECONDS):
        super().__init__(checkpoint, deadline, poll_seconds)
        self.awaited = list(awaited)
        self._endpoint: str | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.TableVersionTrigger",
                {"checkpoint": self.checkpoint, "awaited": self.awaited,
                 "deadline": self.deadline, "poll_seconds": self.poll_seconds})

    async def look(self, settings: CheckpointSettings) -> dict[str, Any] | None:
        if self._endpoint is None:
            storage = await asyncio.to_thread(CheckpointHook(settings).get_storage)
            self._endpoint = storage.endpoint_url or ""
        still, lines = [], []
        for a in (AwaitedVersion.from_json(d) for d in self.awaited):
            try:
                found = await asyncio.to_thread(pin, a.spec, self._endpoint or None)
            except CheckpointError as exc:  # unreadable now: look again, within the grace
                self.log.warning("table %r not read: %s", a.spec.label, exc)
                found = None
            if not a.met_by(found):
                still.append(a.to_json())
                lines.append(a.describe(found))
        self.awaited = still
        return {"lines": lines} if still else None
