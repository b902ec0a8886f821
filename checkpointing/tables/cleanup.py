"""The rule between checkpoint retention and a table's own cleanup (PROTOCOL 6.13, 1.8).

``ckpt retention`` never deletes a table output's data files: they live in the table's
location and belong to the table once committed. Only the table's VACUUM deletes them, and
a VACUUM that knows nothing of the checkpoints would delete the files of a table version a
retained epoch or a savepoint published (its time travel, and a backfill restored from it
that keeps them, need them). :func:`vacuum_tables` runs the format's own VACUUM keeping
those versions (Delta: ``keep_versions``), and files younger than a threshold (the staged
files of running epochs and of a backfill's epochs not yet published).
"""

from __future__ import annotations

from checkpointing.protocol.epoch_reader import EpochReader
from checkpointing.records.savepoints import list_savepoints
from checkpointing.records.two_phase_publish import read_manifest
from checkpointing.tables.format_registry import implementation
from checkpointing.tables.spec import TableSpec, TableVacuum

__all__ = ["DEFAULT_MIN_RETENTION_HOURS", "TableVacuum", "protected_epochs", "vacuum_tables"]

#: Delta's default ``delta.deletedFileRetentionDuration``: files staged by an epoch or
#: removed by a commit within this many hours stay, whatever epochs are retained.
DEFAULT_MIN_RETENTION_HOURS = 168


def protected_epochs(epochs: EpochReader) -> set[int]:
    """Epochs whose table versions must stay readable: every epoch still in checkpoint
    storage (retention keeps it, so it can be restored from, promoted or inspected) and
    every savepoint's epoch."""
    protected = set(epochs.epoch_ids())
    protected |= {sp.epoch_id for sp in list_savepoints(epochs.storage, epochs.layout)}
    return protected


def vacuum_tables(epochs: EpochReader, min_retention_hours: int = DEFAULT_MIN_RETENTION_HOURS,
                  dry_run: bool = False) -> list[TableVacuum]:
    """VACUUM each table output the pipeline publishes, keeping the versions of the
    protected epochs (:func:`protected_epochs`) and files younger than
    ``min_retention_hours``."""
    manifest = read_manifest(epochs.storage, epochs.layout)
    if manifest is None:
        return []
    protected = protected_epochs(epochs)
    endpoint = epochs.storage.endpoint_url
    done = []
    for name, out in sorted(manifest.outputs.items()):
        if "table" not in (out.meta or {}):
            continue
        spec = TableSpec.from_json(out.meta["table"])
        done.append(implementation(spec.format).vacuum(
            name, spec, epochs.pipeline_id, protected, endpoint, min_retention_hours,
            dry_run))
    return done
