"""What one attempt of a task knows, declared once: the attributes :class:`JobRun` holds and
its parts use. The parts are layered, each using only what is below it: the inputs
(:class:`~.run_inputs.RunInputs`), the state and Spark writes
(:class:`~.run_state.RunState`), the outputs (:class:`~.run_outputs.RunOutputs`); ``JobRun``
(the dataclass) fills the attributes in. A part reading an attribute no run has fails the
type check, not a job."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from checkpointing import Coordinator, EngineOperation, SnapshotWriter, StateHandle
from checkpointing.state.task_storage import TaskStorage
from checkpointing.storage import Storage


class RunContext:
    """The attributes of one attempt (documented on :class:`JobRun`)."""

    coordinator: Coordinator
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
    table_offsets: dict[str, dict[str, Any]]
    table_reads: dict[str, dict[str, Any]]
    table_renames: dict[str, dict[str, tuple[str, int]]]
    input_prefixes: list[str]
    _write_lock: threading.Lock
    _writes_running: int
    _writes_since: float
