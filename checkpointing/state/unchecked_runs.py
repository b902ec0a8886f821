"""Where a run with checkpointing disabled keeps its files: ``<pipeline>/unchecked/<run>/``,
outside the protocol (PROTOCOL 4). The job runtime's ``spark_jobs.runtime.unchecked``
runs such a task; this module owns its keys, so the runtime never builds one."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from checkpointing.protocol.layout import Layout
from checkpointing.state.task_storage import TaskStorage
from checkpointing.storage import Storage


def run_key(run_id: str) -> str:
    """The directory name of one run's files (run ids hold characters keys must not)."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class UncheckedLayout(Layout):
    """The pipeline's keys, but an attempt's state and staging prefixes are the run's
    scratch: ``<pipeline>/unchecked/<run>/{state,staging}/<task>/``."""

    run: str = ""

    @property
    def unchecked_prefix(self) -> str:
        return f"{self.base}unchecked/"

    def state_prefix(self, epoch_id: int, task_id: str, attempt: int) -> str:
        return f"{self.unchecked_prefix}{self.run}/state/{task_id}/"

    def staging_prefix(self, epoch_id: int, task_id: str, attempt: int) -> str:
        return f"{self.unchecked_prefix}{self.run}/staging/{task_id}/"


@dataclass(frozen=True)
class UncheckedRun:
    """The files of one run with checkpointing disabled."""

    _storage: Storage
    pipeline_id: str
    run_id: str

    @property
    def layout(self) -> UncheckedLayout:
        return UncheckedLayout(self.pipeline_id, run=run_key(self.run_id))

    def task_storage(self, task_id: str, epoch_id: int) -> TaskStorage:
        """Task ``task_id``'s storage in this run (one attempt; ``epoch_id`` names its
        table staging directories)."""
        return TaskStorage(self._storage, self.layout, epoch_id, task_id, 1)

    def clear_earlier_runs(self) -> int:
        """Delete what earlier unchecked runs of the pipeline left; returns the objects
        deleted."""
        layout = self.layout
        mine = f"{layout.unchecked_prefix}{layout.run}/"
        n = 0
        for obj in list(self._storage.list(layout.unchecked_prefix)):
            if not obj.key.startswith(mine):
                self._storage.delete(obj.key)
                n += 1
        return n
