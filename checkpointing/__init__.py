"""DAG-level checkpoints: Flink's checkpoint coordinator carried over to DAG runs.

The library imports nothing from Airflow or Spark. The on-storage format is specified in
docs/PROTOCOL.md.
"""

from .acknowledgement import Acknowledgement
from .barrier import Barrier, TaskPlan, plan_from_edges
from .config import CheckpointConfig
from .coordinator import AlignmentError, AttemptStart, Coordinator, RestoreMappingError
from .documents import PROTOCOL_VERSION
from .epoch_metadata import EpochMetadata
from .errors import *  # noqa: F403
from .incremental import SnapshotWriter, restore_files
from .operations import EngineOperation
from .publish import Manifest, read_manifest
from .retention import run_retention
from .savepoints import create_savepoint, delete_savepoint, list_savepoints, read_savepoint
from .state_handle import FileRef, OutputRef, StateHandle
from .stats import epoch_stats
from .storage import LocalStorage, Storage, open_storage
from .table_inputs import TableInput, TableVersion
from .tables import TableSpec
from .verify import verify_epoch

__all__ = [
    "Acknowledgement", "AlignmentError", "AttemptStart", "Barrier", "CheckpointConfig",
    "Coordinator", "EngineOperation", "EpochMetadata", "FileRef", "LocalStorage", "Manifest",
    "OutputRef",
    "PROTOCOL_VERSION", "RestoreMappingError", "SnapshotWriter", "StateHandle", "Storage",
    "TableInput", "TableSpec", "TableVersion", "TaskPlan", "create_savepoint",
    "delete_savepoint", "epoch_stats",
    "list_savepoints", "open_storage", "plan_from_edges", "read_manifest", "read_savepoint",
    "restore_files", "run_retention", "verify_epoch",
]
