"""DAG-level checkpoints: Flink's checkpoint coordinator carried over to DAG runs.

The library imports nothing from Airflow or Spark. The on-storage format is specified in
docs/PROTOCOL.md.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

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

#: Where the modules of the flat layout (release 0.x) went; importing an old name still
#: works, with a DeprecationWarning, until the next minor release.
_MOVED = {
    "layout": "protocol.layout",
    "documents": "protocol.documents",
    "codec": "protocol.codec",
    "cas": "protocol.cas",
    "barrier": "protocol.barrier",
    "epoch_metadata": "protocol.epoch_metadata",
    "decision": "protocol.decision",
    "state_handle": "protocol.state_handle",
    "acknowledgement": "protocol.acknowledgement",
    "markers": "protocol.markers",
    "operations": "protocol.operations",
    "registry": "protocol.registry",
    "attempts": "protocol.attempts",
    "incremental": "state.incremental",
    "task_storage": "state.task_storage",
    "unchecked": "state.unchecked_runs",
    "delta": "tables.delta",
    "iceberg": "tables.iceberg",
    "formats": "protocol.table_formats",
    "format_registry": "tables.format_registry",
    "table_changes": "tables.changes",
    "table_commit": "tables.commit",
    "table_expectations": "tables.expectations",
    "table_inputs": "protocol.table_inputs",
    "table_pins": "tables.pins",
    "table_retention": "tables.cleanup",
    "staging": "tables.staging",
    "stats": "views.stats",
    "summary": "views.summary",
    "history": "protocol.history",
    "listing": "views.listing",
    "catalog": "views.catalog",
    "verify": "state.verify",
    "coordinator": "coordination.coordinator",
    "epoch_store": "coordination.epoch_store",
    "request_decider": "coordination.request_decider",
    "parent_selector": "coordination.parent_selector",
    "failure_manager": "coordination.failure_manager",
    "epoch_finisher": "coordination.epoch_finisher",
    "promotion": "coordination.promotion",
    "lease": "coordination.lease",
    "listener": "protocol.listener",
    "alerts": "records.alerts",
    "staleness": "coordination.staleness",
    "retention": "coordination.retention",
    "savepoints": "records.savepoints",
    "lineages": "records.backfill_lineages",
    "publish": "records.two_phase_publish",
    "cli": "ckpt",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``checkpointing.<old>`` as the module it moved to, warning once per name."""

    def find_spec(self, fullname: str, path: object, target: object = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix("checkpointing.")
        if fullname == old or old not in _MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = "checkpointing." + _MOVED[spec.name.removeprefix("checkpointing.")]
        warnings.warn(f"{spec.name} moved to {new}; the old name goes in the next minor "
                      "release", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:
        """The module it moved to is imported already."""


sys.meta_path.append(_MovedModules())

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
