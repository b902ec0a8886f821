"""What one attempt of a task knows, declared once: the attributes :class:`JobRun` holds and
its parts use. The parts are layered, each using only what is below it: the inputs
(:class:`~.run_inputs.RunInputs`), the state and Spark writes
(:class:`~.run_state.RunState`), the outputs (:class:`~.run_outputs.RunOutputs`); ``JobRun``
(the dataclass) fills the attributes in. A part reading an attribute no run has fails the
type check, not a job."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol

from checkpointing import EngineOperation, SnapshotWriter, StateHandle
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.listings import FileListing
from checkpointing.protocol.table_inputs import TableVersion
from checkpointing.state.task_storage import TaskStorage
from checkpointing.storage import Storage


class OperationLog(Protocol):
    """Where an attempt records the long engine action it starts (PROTOCOL 5.17), so that a
    later attempt of the epoch can reattach to it: the coordinator, in a checked run."""

    def record_operation(self, epoch_id: int, op: EngineOperation) -> None: ...


class NoOperationLog:
    """A run without an epoch (checkpointing disabled, a benchmark's control): no later
    attempt resumes its operations, so none is recorded."""

    def record_operation(self, epoch_id: int, op: EngineOperation) -> None:
        """Nothing to record."""


class FileListings(Protocol):
    """Where an epoch records the listing of each prefix of landed files it reads (PROTOCOL
    5.21, 6.16), so that every task and attempt of the epoch reads the same files: the
    coordinator, in a checked run."""

    def pin_listing(self, epoch_id: int, source: str, listed: FileListing) -> FileListing: ...


class NoFileListings:
    """A run without an epoch: no other attempt reads with it, so what it lists is what it
    reads."""

    def pin_listing(self, epoch_id: int, source: str, listed: FileListing) -> FileListing:
        """``listed`` itself."""
        return listed


class RunContext:
    """The attributes of one attempt (documented on :class:`JobRun`)."""

    #: the epoch's barrier: its plan (the task's table inputs), pinned versions, data
    #: interval, parent and configuration; all a job reads of its epoch
    barrier: Barrier
    operations: OperationLog
    listings: FileListings
    epoch_id: int
    task_id: str
    attempt: int
    #: a classic or a Spark Connect ``SparkSession`` (two classes, one API)
    spark: Any
    data: Storage | None
    previous: StateHandle | None
    upstream: dict[str, StateHandle]
    writer: SnapshotWriter
    scratch: Path
    storage: TaskStorage
    snapshot_write_ms: float
    resume: EngineOperation | None
    resumed: list[str]
    table_offsets: dict[str, TableVersion]
    table_reads: dict[str, dict[str, Any]]
    table_renames: dict[str, dict[str, tuple[str, int]]]
    input_prefixes: list[str]
    _write_lock: threading.Lock
    _writes_running: int
    _writes_since: float
