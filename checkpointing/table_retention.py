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

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .publish import read_manifest
from .savepoints import list_savepoints
from .tables import TableSpec

#: Delta's default ``delta.deletedFileRetentionDuration``: files staged by an epoch or
#: removed by a commit within this many hours stay, whatever epochs are retained.
DEFAULT_MIN_RETENTION_HOURS = 168


@dataclass(frozen=True)
class TableVacuum:
    """What VACUUM did (or, ``dry_run``, would do) to one table output."""

    output: str
    kept_versions: tuple[int, ...]
    files_deleted: int
    dry_run: bool

    def describe(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        kept = ", ".join(f"v{v}" for v in self.kept_versions) or "none"
        return (f"{self.output}: {verb} {self.files_deleted} file(s); versions kept for "
                f"retained epochs and savepoints: {kept}")


def protected_epochs(coordinator: Any) -> set[int]:
    """Epochs whose table versions must stay readable: every epoch still in checkpoint
    storage (retention keeps it, so it can be restored from, promoted or inspected) and
    every savepoint's epoch."""
    epochs = set(coordinator.epoch_ids())
    epochs |= {sp.epoch_id for sp in list_savepoints(coordinator.storage, coordinator.layout)}
    return epochs


def vacuum_tables(coordinator: Any, min_retention_hours: int = DEFAULT_MIN_RETENTION_HOURS,
                  dry_run: bool = False) -> list[TableVacuum]:
    """VACUUM each table output the pipeline publishes, keeping the versions of the
    protected epochs (:func:`protected_epochs`) and files younger than
    ``min_retention_hours``."""
    manifest = read_manifest(coordinator.storage, coordinator.layout)
    if manifest is None:
        return []
    protected = protected_epochs(coordinator)
    endpoint = getattr(coordinator.storage, "endpoint_url", None)
    done = []
    for name, out in sorted(manifest.outputs.items()):
        if "table" not in (out.meta or {}):
            continue
        spec = TableSpec.from_json(out.meta["table"])
        vacuum = _vacuum_delta if spec.format == "delta" else _vacuum_iceberg
        done.append(vacuum(name, spec, coordinator.pipeline_id, protected, endpoint,
                           min_retention_hours, dry_run))
    return done


def _vacuum_delta(output: str, spec: TableSpec, pipeline_id: str, protected: set[int],
                  endpoint: str | None, min_retention_hours: int,
                  dry_run: bool) -> TableVacuum:
    from .delta import open_table
    from .storage import open_storage

    dt = open_table(spec.location, endpoint)
    prefix = f"ckpt:{pipeline_id}:"
    keep = sorted({int(c["version"]) for c in dt.history()
                   if str(c.get("ckpt.app_id", "")).startswith(prefix)
                   and c.get("ckpt.epoch_id", "").isdigit()
                   and int(c["ckpt.epoch_id"]) in protected})
    # full: also files no version references (staged by aborted attempts), once older
    # than the threshold; the threshold may be below Delta's own default on purpose.
    args = {"retention_hours": min_retention_hours, "enforce_retention_duration": False,
            "full": True, "keep_versions": keep}
    # delta-rs lists a removed file again while its tombstone is in the log, deleted or
    # not: count the candidates that still exist.
    store = open_storage(spec.location, endpoint_url=endpoint)
    present = [p for p in dt.vacuum(dry_run=True, **args) if store.exists(unquote(p))]
    if present and not dry_run:
        dt.vacuum(dry_run=False, **args)
    return TableVacuum(output, tuple(keep), len(present), dry_run)


def _vacuum_iceberg(output: str, spec: TableSpec, pipeline_id: str, protected: set[int],
                    endpoint: str | None, min_retention_hours: int,
                    dry_run: bool) -> TableVacuum:
    """Iceberg's side of 6.13: expire the snapshots no protected epoch committed (but the
    current one and those younger than the threshold), then delete the data files in the
    table's location that no remaining snapshot references and that are older than the
    threshold (pyiceberg expires snapshots' metadata only and has no orphan-file
    removal, so the deletion is done here, through the library's storage)."""
    import time

    from .iceberg import file_path, open_table
    from .storage import open_storage

    table = open_table(spec, endpoint)
    horizon_ms = (time.time() - min_retention_hours * 3600) * 1000
    prefix = f"ckpt:{pipeline_id}:"
    current = table.current_snapshot()
    keep, expire = [], []
    for snap in table.snapshots():
        summary = snap.summary
        ours = summary is not None and str(summary.get("ckpt.app_id", "")).startswith(prefix)
        epoch = int(summary.get("ckpt.epoch_id", "0")) if ours else None
        if (epoch in protected or snap.timestamp_ms >= horizon_ms
                or (current is not None and snap.snapshot_id == current.snapshot_id)):
            keep.append(snap)
        else:
            expire.append(snap.snapshot_id)
    referenced = {file_path(task.file.file_path) for snap in keep
                  for task in table.scan(snapshot_id=snap.snapshot_id).plan_files()}
    store = open_storage(spec.location, endpoint_url=endpoint)
    doomed = [o.key for o in store.list("") if o.key.endswith(".parquet")
              and not o.key.startswith("metadata/")
              and file_path(store.uri(o.key)) not in referenced
              and o.last_modified * 1000 < horizon_ms]
    if not dry_run:
        if expire:
            table.maintenance.expire_snapshots().by_ids(expire).commit()
        for key in doomed:
            store.delete(key)
    kept = tuple(sorted(s.snapshot_id for s in keep
                        if s.summary is not None and s.summary.get("ckpt.epoch_id", "").isdigit()
                        and int(s.summary["ckpt.epoch_id"]) in protected))
    return TableVacuum(output, kept, len(doomed), dry_run)
