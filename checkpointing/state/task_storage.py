"""One task attempt's view of checkpoint storage, as Flink's CheckpointStorageWorkerView
is a task's: where the attempt writes its state and staged outputs, how it reads its
restored state files, and how it discards what it wrote. The job runtime gets one from
the coordinator (``Coordinator.task_storage``) and never the storage or key layout
itself: the keys of PROTOCOL 4 stay inside the library."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from checkpointing.protocol.layout import Layout
from checkpointing.protocol.state_handle import FileRef, StateHandle
from checkpointing.state.incremental import SnapshotWriter
from checkpointing.storage import LocalStorage, Storage
from checkpointing.tables.spec import staged_dir

Area = Literal["state", "staging"]


@dataclass(frozen=True)
class TaskStorage:
    """Storage for attempt ``attempt`` of task ``task_id`` in epoch ``epoch_id``."""

    _storage: Storage
    _layout: Layout
    epoch_id: int
    task_id: str
    attempt: int

    @property
    def pipeline_id(self) -> str:
        return self._layout.pipeline_id

    @property
    def local(self) -> bool:
        """Whether checkpoints live on this machine's file system (not an object store)."""
        return isinstance(self._storage, LocalStorage)

    @property
    def endpoint_url(self) -> str | None:
        """The S3-compatible endpoint Spark and table libraries must use (None: AWS/files)."""
        return self._storage.endpoint_url

    def writer(self, previous: StateHandle | None, *, shared: bool = True,
               digests: bool = True) -> SnapshotWriter:
        """The attempt's snapshot writer, incremental against ``previous``."""
        return SnapshotWriter(self._storage, self._layout, self.epoch_id, self.task_id,
                              self.attempt, previous=previous, shared=shared, digests=digests)

    def read(self, ref: FileRef) -> bytes:
        """The bytes of a restored state file."""
        key = self._storage.key_for_uri(ref.uri)
        if key is None:
            raise ValueError(f"state file {ref.name!r} is not in this pipeline's storage")
        return self._storage.read(key)[0]

    def area(self, area: Area, sub: str, attempt: int | None = None) -> tuple[str, str]:
        """(URI, key prefix) of directory ``sub`` in the attempt's state or staging area
        (``attempt``'s, when resuming an earlier attempt's operation): where Spark writes
        files the snapshot then adds by key."""
        a = attempt or self.attempt
        prefix = (self._layout.state_prefix if area == "state" else
                  self._layout.staging_prefix)(self.epoch_id, self.task_id, a) + f"{sub}/"
        return self._storage.uri(prefix), prefix

    def stored(self, prefix: str) -> list[str]:
        """The data files under ``prefix`` (not Spark's ``_SUCCESS`` or hidden files, nor
        the empty directory markers S3A's ``mkdirs`` leaves on an object store)."""
        return [o.key for o in self._storage.list(prefix)
                if not o.key.endswith("/")
                and not o.key.rsplit("/", 1)[-1].startswith((".", "_"))]

    def table_staging_dir(self, attempt: int | None = None) -> str:
        """The directory, inside a table's location, the attempt stages its files in."""
        return staged_dir(self.pipeline_id, self.epoch_id, self.task_id,
                          attempt or self.attempt)

    def discard(self) -> None:
        """Delete everything the attempt wrote in its state and staging areas (an epoch
        decided while it ran: what it wrote is nobody's, PROTOCOL 6.11)."""
        for prefix in (self._layout.state_prefix(self.epoch_id, self.task_id, self.attempt),
                       self._layout.staging_prefix(self.epoch_id, self.task_id, self.attempt)):
            for obj in list(self._storage.list(prefix)):
                self._storage.delete(obj.key)
