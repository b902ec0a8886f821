"""Retention (Flink's state.checkpoints.num-retained plus the SharedStateRegistry's
reference counting): delete old and aborted epochs without deleting any file that a kept
epoch, a savepoint or the published manifest still references (PROTOCOL 6.9)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.errors import CheckpointError, EpochNotFound, MalformedDocument
from checkpointing.protocol.attempts import scan_epoch_tasks
from checkpointing.protocol.documents import parse_iso
from checkpointing.protocol.history import prune_history, record_failure
from checkpointing.protocol.registry import Registry
from checkpointing.records.backfill_lineages import list_origins
from checkpointing.records.savepoints import list_savepoints
from checkpointing.records.two_phase_publish import Manifest, published_tables, read_manifest
from checkpointing.storage import ObjectInfo
from checkpointing.tables.spec import TableSpec
from checkpointing.tables.staging import of_deleted_epoch
from checkpointing.views.stats import epoch_stats
from checkpointing.views.summary import keep_summary, read_summary

log = logging.getLogger("checkpointing.coordination.retention")
_CLOCK_SKEW_S = 60.0  # shared files younger than the oldest open epoch minus this are kept


class Retained(Protocol):
    """What retention needs of a pipeline (the coordinator is one): its epoch store, its
    configuration, and its registry once interrupted decisions are finished."""

    store: EpochStore
    config: CheckpointConfig

    def recover(self) -> Registry: ...


@dataclass
class RetentionReport:
    kept_epochs: list[int] = field(default_factory=list)
    deleted_epochs: list[int] = field(default_factory=list)
    deleted_objects: int = 0
    deleted_shared: int = 0
    skipped: list[str] = field(default_factory=list)
    pruned_history: list[int] = field(default_factory=list)
    #: files deleted epochs staged in table locations that no table references
    deleted_staged: int = 0


def run_retention(coordinator: Retained, dry_run: bool = False) -> RetentionReport:
    """Apply the retention policy of ``coordinator.config`` to its pipeline: keep the
    retained completed epochs of each lineage, what is in flight and what they restore from,
    and everything a kept epoch, the manifest or a savepoint references; delete the rest,
    each epoch whole or not at all; then the shared files nothing references."""
    store, config = coordinator.store, coordinator.config
    storage, layout = store.storage, store.layout
    report = RetentionReport()
    reg = coordinator.recover()
    epochs = store.epoch_ids()
    status, lineage = _classify(store, epochs, report)
    keep = _epochs_to_keep(store, config.retained_epochs, epochs, status, lineage,
                           {o.epoch_id for o in reg.open})
    referenced = _referenced_files(store, keep, status)
    doomed = _doomed_epochs(store, epochs, keep, status, referenced)
    report.kept_epochs = sorted(k for k in keep if k in status)
    _delete_epochs(store, doomed, status, report, dry_run, referenced)
    report.pruned_history = prune_history(
        storage, layout, config.failure_history,
        protect={e for e in epochs if e not in doomed}, dry_run=dry_run,
        keep_summaries=config.epoch_history)
    # Shared files: unreferenced and older than every epoch in flight.
    cutoff = min([parse_iso(o.created_at) for o in reg.open] + [store.clock()])
    cutoff -= _CLOCK_SKEW_S
    for o in storage.list(layout.shared_prefix):
        if storage.uri(o.key) in referenced or o.last_modified >= cutoff:
            continue
        if not dry_run:
            storage.delete(o.key)
        report.deleted_shared += 1
    for e in report.deleted_epochs:
        store.forget(e)
    return report


def _classify(store: EpochStore, epochs: list[int],
              report: RetentionReport) -> tuple[dict[int, str], dict[int, str]]:
    """Each epoch's status (``unreadable`` for malformed metadata: never deleted) and
    lineage."""
    status: dict[int, str] = {}
    lineage: dict[int, str] = {}
    for e in epochs:
        try:
            meta = store.metadata(e)
        except MalformedDocument as exc:  # never delete what we cannot read
            report.skipped.append(str(exc))
            status[e] = "unreadable"
            continue
        status[e] = meta.status if meta else _undocumented_status(store, e)
        lineage[e] = meta.lineage if meta else ""
    return status, lineage


def _epochs_to_keep(store: EpochStore, retained: int, epochs: list[int], status: dict[int, str],
                    lineage: dict[int, str], open_ids: set[int]) -> set[int]:
    """What retention keeps by rule: epochs in flight or unreadable, the retained completed
    epochs of each lineage, the parents of epochs in flight, a backfill's origin not yet
    continued, and the manifest's epoch."""
    keep = {e for e in epochs if status[e] in ("pending", "unreadable") or e in open_ids}
    by_lineage: dict[str, list[int]] = {}
    for e in epochs:
        if status[e] == "completed":
            by_lineage.setdefault(lineage[e], []).append(e)
    for ids in by_lineage.values():
        keep.update(sorted(ids)[-retained:])
    for e in list(keep):  # parents of live epochs stay restorable
        if status.get(e) == "pending":
            try:
                parent = store.barrier(e).parent_epoch_id
            except EpochNotFound:  # allocated, its barrier not written (yet): no parent
                parent = None
            # Any other error (storage unreachable, a malformed barrier) propagates: this
            # run cannot tell which parent the epoch restores from, so it deletes nothing.
            if parent:
                keep.add(parent)
    for origin in list_origins(store.storage, store.layout):
        if origin.from_epoch and not by_lineage.get(origin.lineage):  # not started yet
            keep.add(origin.from_epoch)
    manifest = read_manifest(store.storage, store.layout)
    if manifest:
        keep.add(manifest.epoch_id)
    return keep


def _referenced_files(store: EpochStore, keep: set[int],
                      status: dict[int, str]) -> set[str]:
    """URIs of every file the manifest, a savepoint or a kept epoch references (every
    acknowledgement of an epoch in flight, whatever the clocks say)."""
    storage, layout = store.storage, store.layout
    referenced: set[str] = set()
    manifest = read_manifest(storage, layout)
    if manifest:
        referenced.update(f.uri for f in manifest.files())
    for sp in list_savepoints(storage, layout):
        for h in sp.handles().values():
            referenced.update(f.uri for f in h.all_files())
    for e in sorted(keep):
        if status.get(e) == "completed":
            for h in store.completed_handles(e).values():
                referenced.update(f.uri for f in h.all_files())
        elif status.get(e) == "pending":
            for ta in scan_epoch_tasks(storage, layout, e).values():
                for info in ta.acks.values():
                    h = store.read_ack(info.key).state_handle
                    referenced.update(f.uri for f in h.all_files())
    return referenced


def _doomed_epochs(store: EpochStore, epochs: list[int], keep: set[int],
                   status: dict[int, str], referenced: set[str]) -> dict[int, list[ObjectInfo]]:
    """The epochs to delete with their objects. An epoch is deleted whole or not at all:
    one whose files a savepoint, the manifest or a kept epoch still references keeps its
    documents too, so it never shows up half-deleted (files without the barrier and
    _metadata that describe them); a completed epoch kept that way stays restorable, its
    own references counting too (``keep`` and ``referenced`` grow accordingly)."""
    storage, layout = store.storage, store.layout
    doomed = {e: list(storage.list(layout.epoch_prefix(e))) for e in epochs if e not in keep}
    changed = True
    while changed:
        changed = False
        for e, objs in list(doomed.items()):
            if any(storage.uri(o.key) in referenced for o in objs):
                del doomed[e]
                keep.add(e)
                changed = True
                if status.get(e) == "completed":
                    for h in store.completed_handles(e).values():
                        referenced.update(f.uri for f in h.all_files())
    return doomed


def _delete_epochs(store: EpochStore, doomed: dict[int, list[ObjectInfo]],
                   status: dict[int, str], report: RetentionReport, dry_run: bool,
                   referenced: set[str]) -> None:
    storage = store.storage
    manifest = read_manifest(storage, store.layout) if doomed else None
    for e, objs in doomed.items():
        if status.get(e) == "orphan":
            log.warning("pipeline %s: deleting %d object(s) written into epoch %d after "
                        "it was decided and deleted", store.pipeline_id, len(objs), e)
        if not dry_run and status.get(e) == "aborted":
            _keep_failure_record(store, e, objs)
        if not dry_run and status.get(e) == "completed":
            _keep_summary(store, e, manifest)
        # Documents last, _metadata very last: a crash mid-way leaves a decided epoch.
        objs.sort(key=lambda o: (o.key.endswith("_metadata"), "/tasks/" in o.key
                                 or o.key.endswith("barrier.json")))
        # Staged table files first: the epoch's documents name the tables they are in.
        report.deleted_staged += _delete_staged(store, e, status.get(e), referenced,
                                                manifest, dry_run)
        if not dry_run:
            _forget_run(store, e)
            for o in objs:
                storage.delete(o.key)
        report.deleted_objects += len(objs)
        report.deleted_epochs.append(e)


def _delete_staged(store: EpochStore, epoch_id: int, status: str | None,
                   referenced: set[str], manifest: Manifest | None, dry_run: bool) -> int:
    """What the epoch's attempts staged in table locations and no table references
    (:mod:`.staging`): the tables are those the manifest publishes and those the epoch's
    own acknowledgements name; a completed epoch's committed files stay."""
    storage, layout = store.storage, store.layout
    handles = []
    if status == "completed":
        handles = list(store.completed_handles(epoch_id).values())
    elif status in ("aborted", "orphan", "pending"):
        for ta in scan_epoch_tasks(storage, layout, epoch_id).values():
            for info in ta.acks.values():
                try:
                    handles.append(store.read_ack(info.key).state_handle)
                except CheckpointError:  # a late writer's remnant: it names no table
                    continue
    specs, keep = [], set(referenced)
    outputs = [o for h in handles for o in h.outputs.values()]
    for out in outputs + list(manifest.outputs.values() if manifest else ()):
        if "table" in (out.meta or {}):
            spec = TableSpec.from_json(out.meta["table"])
            specs.append(spec)
            if status == "completed" and out in outputs and spec.mode != "merge":
                keep.update(f.uri for f in out.files)
    if not specs:
        return 0
    return of_deleted_epoch(specs, store.pipeline_id, epoch_id, keep,
                            storage.endpoint_url, dry_run)


def _undocumented_status(store: EpochStore, epoch_id: int) -> str:
    """The status of an epoch directory without ``_metadata``: ``pending``, or ``orphan``
    when the epoch was decided and deleted before (objects a late writer left there,
    which nothing references: PROTOCOL 6.11)."""
    try:
        decision = store.decision(epoch_id, metadata_absent=True)
    except EpochNotFound:  # not allocated by the registry: never delete what we don't know
        return "pending"
    return "pending" if decision is None else "orphan"


def _keep_failure_record(store: EpochStore, epoch_id: int, objs: list[ObjectInfo]) -> None:
    """Before an aborted epoch's files go: its failure record (if the aborting process died
    before writing it) and an alert written where protocol 1.2 kept it, moved to history."""
    storage, layout = store.storage, store.layout
    meta = store.metadata(epoch_id)
    if meta is None:  # called for aborted epochs only: decided, so documented
        return
    try:
        barrier = store.barrier(epoch_id)
    except CheckpointError:
        barrier = None
    record_failure(storage, layout, meta, barrier)
    legacy = layout.legacy_alert(epoch_id)
    if any(o.key == legacy for o in objs) and not storage.exists(layout.alert(epoch_id)):
        storage.create(layout.alert(epoch_id), storage.read(legacy)[0])


def _keep_summary(store: EpochStore, epoch_id: int,
                  manifest: Manifest | None) -> None:
    """Before a completed epoch's files go: its statistics, with its tasks' metrics, its
    table pins and reads and the table versions it committed, in its history entry."""
    storage, layout = store.storage, store.layout
    stats = read_summary(storage, layout, epoch_id)
    if stats is None or not stats.tasks or any(t.status == "acked" and not t.metrics
                                              for t in stats.tasks):
        stats = epoch_stats(store, epoch_id, per_task=True)  # an older summary
    stats.tables = published_tables(manifest, epoch_id)
    keep_summary(storage, layout, stats)


def _forget_run(store: EpochStore, epoch_id: int) -> None:
    """Drop the run index entry of an epoch being deleted (its run is then unknown: a
    re-run of it opens a new epoch)."""
    try:
        b = store.barrier(epoch_id)
    except CheckpointError:
        return
    store.storage.delete(store.layout.run_index_entry(b.lineage, b.run_id,
                                                                  epoch_id))
