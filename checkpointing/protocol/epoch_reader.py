"""What the read side needs of a pipeline's epochs (Flink's ``CompletedCheckpointStore``,
as its readers see it): the epochs' documents, never the coordinator that decides them.

The coordination room's ``EpochStore`` is one; the ``Coordinator`` is another (it
delegates to its store). Statistics, listings, verification, savepoints, table cleanup
and leases take this, so that none of them can begin, acknowledge or decide an epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from checkpointing.protocol.acknowledgement import Acknowledgement
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.decision import Decision
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.registry import MAIN, Registry
from checkpointing.protocol.state_handle import StateHandle
from checkpointing.storage import Storage


class EpochReader(Protocol):
    """Read access to one pipeline's epoch documents (PROTOCOL 5)."""

    storage: Storage
    layout: Layout
    clock: Callable[[], float]

    @property
    def pipeline_id(self) -> str: ...

    def registry(self) -> Registry: ...

    def epoch_ids(self) -> list[int]: ...

    def barrier(self, epoch_id: int) -> Barrier: ...

    def metadata(self, epoch_id: int) -> EpochMetadata | None: ...

    def decision(self, epoch_id: int, *, metadata_absent: bool = False,
                 barrier_read: bool = False) -> Decision | None: ...

    def read_ack(self, key: str) -> Acknowledgement: ...

    def completed_handles(self, epoch_id: int) -> dict[str, StateHandle]: ...

    def latest_completed(self, lineage: str = MAIN) -> int | None: ...

    def next_attempt(self, epoch_id: int) -> int: ...
