"""The triggers a task waits on, deferred, for the input it expects: its data day's files,
or new versions of its table inputs (see :mod:`dag_checkpoints.expected_inputs`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from checkpointing.errors import CheckpointError
from checkpointing.table_changes import pin
from checkpointing.table_expectations import AwaitedVersion

from ..expected_inputs import missing_keys
from ..settings import CheckpointSettings

#: the longest pause between two looks at the data root
MAX_POLL_SECONDS = 30.0


class ExpectedInputTrigger(BaseTrigger):
    """Fires ``{"status": "landed"}`` once every key exists under the DAG's data root, or
    ``{"status": "missing", "keys": [...]}`` when ``deadline`` (epoch seconds) passes
    first. Storage is read in a worker thread of the event loop, one listing at a time."""

    def __init__(self, checkpoint: dict[str, Any], keys: list[str], deadline: float,
                 poll_seconds: float = MAX_POLL_SECONDS):
        super().__init__()
        self.checkpoint, self.keys = checkpoint, list(keys)
        self.deadline, self.poll_seconds = float(deadline), float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.ExpectedInputTrigger",
                {"checkpoint": self.checkpoint, "keys": self.keys,
                 "deadline": self.deadline, "poll_seconds": self.poll_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = CheckpointSettings.from_kwargs(self.checkpoint)
        data = await asyncio.to_thread(settings.open_data_storage)
        missing = list(self.keys)
        while True:
            try:
                missing = await asyncio.to_thread(missing_keys, data, missing)
            except CheckpointError as exc:  # a store down: look again, within the grace
                self.log.warning("expected input not checked: %s", exc)
            if not missing:
                yield TriggerEvent({"status": "landed"})
                return
            left = self.deadline - time.time()
            if left <= 0:
                yield TriggerEvent({"status": "missing", "keys": missing})
                return
            await asyncio.sleep(max(0.1, min(self.poll_seconds, left)))


class TableVersionTrigger(BaseTrigger):
    """Fires ``{"status": "landed"}`` once every awaited table input (serialized
    :class:`~checkpointing.table_expectations.AwaitedVersion`) has a version newer than the
    one its parent epoch read, or ``{"status": "missing", "lines": [...]}`` when
    ``deadline`` (epoch seconds) passes first. Each look reads the tables' logs (their
    newest version), in a worker thread of the event loop."""

    def __init__(self, checkpoint: dict[str, Any], awaited: list[dict[str, Any]],
                 deadline: float, poll_seconds: float = MAX_POLL_SECONDS):
        super().__init__()
        self.checkpoint, self.awaited = checkpoint, list(awaited)
        self.deadline, self.poll_seconds = float(deadline), float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.TableVersionTrigger",
                {"checkpoint": self.checkpoint, "awaited": self.awaited,
                 "deadline": self.deadline, "poll_seconds": self.poll_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = CheckpointSettings.from_kwargs(self.checkpoint)
        endpoint = settings.open_storage().endpoint_url
        waiting = [AwaitedVersion.from_json(a) for a in self.awaited]
        lines = [a.describe(None) for a in waiting]
        while True:
            still, lines = [], []
            for a in waiting:
                try:
                    found = await asyncio.to_thread(pin, a.spec, endpoint)
                except CheckpointError as exc:  # unreadable now: look again, within the grace
                    self.log.warning("table %r not read: %s", a.spec.label, exc)
                    still.append(a)
                    lines.append(a.describe(None))
                    continue
                if not a.met_by(found):
                    still.append(a)
                    lines.append(a.describe(found))
            waiting = still
            if not waiting:
                yield TriggerEvent({"status": "landed"})
                return
            left = self.deadline - time.time()
            if left <= 0:
                yield TriggerEvent({"status": "missing", "lines": lines})
                return
            await asyncio.sleep(max(0.1, min(self.poll_seconds, left)))
