"""DAG-level checkpoints: Flink's checkpoint coordinator carried over to DAG runs.

The library imports nothing from Airflow or Spark. The on-storage format is specified in
docs/PROTOCOL.md.
"""

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.coordinator import (
    AlignmentError,
    AttemptStart,
    Coordinator,
    RestoreMappingError,
)
from checkpointing.coordination.retention import run_retention
from checkpointing.errors import *  # noqa: F403
from checkpointing.protocol.acknowledgement import Acknowledgement
from checkpointing.protocol.barrier import Barrier, TaskPlan, plan_from_edges
from checkpointing.protocol.documents import PROTOCOL_VERSION
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.file_inputs import FileInput
from checkpointing.protocol.operations import EngineOperation
from checkpointing.protocol.state_handle import FileRef, OutputRef, StateHandle
from checkpointing.protocol.table_inputs import TableInput, TableVersion
from checkpointing.records.savepoints import (
    create_savepoint,
    delete_savepoint,
    list_savepoints,
    read_savepoint,
)
from checkpointing.records.two_phase_publish import Manifest, read_manifest
from checkpointing.state.incremental import SnapshotWriter, restore_files
from checkpointing.state.verify import verify_epoch
from checkpointing.storage import LocalStorage, Storage, open_storage
from checkpointing.tables.spec import TableSpec
from checkpointing.views.stats import epoch_stats

__all__ = [
    "Acknowledgement", "AlignmentError", "AttemptStart", "Barrier", "CheckpointConfig",
    "Coordinator", "EngineOperation", "EpochMetadata", "FileInput", "FileRef", "LocalStorage",
    "Manifest",
    "OutputRef",
    "PROTOCOL_VERSION", "RestoreMappingError", "SnapshotWriter", "StateHandle", "Storage",
    "TableInput", "TableSpec", "TableVersion", "TaskPlan", "create_savepoint",
    "delete_savepoint", "epoch_stats",
    "list_savepoints", "open_storage", "plan_from_edges", "read_manifest", "read_savepoint",
    "restore_files", "run_retention", "verify_epoch",
]
