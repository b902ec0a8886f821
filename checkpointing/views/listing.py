"""Listing epochs for the CLI, the REST API and the Epochs page: newest first, paged.

A decided epoch's row comes from this process's cache, else from its summary (5.7), else
from its documents (and then its summary is written, so every later reader pays one read); a
failed epoch whose files retention deleted comes from its failure record (5.12). Only
pending epochs are read in full every time. A page of 50 rows of a year of daily epochs
costs the listings and one registry read once the rows are cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpointing.json_types import JsonObject
from checkpointing.protocol.epoch_reader import EpochReader
from checkpointing.protocol.history import history_ids
from checkpointing.records.two_phase_publish import Manifest, published_tables
from checkpointing.views.stats import EpochStats, any_epoch_stats
from checkpointing.views.summary import CACHE, SummaryCache, read_summary, write_summary


@dataclass
class EpochListing:
    """A page of epochs, newest first; ``total`` counts every epoch that matches."""

    rows: list[EpochStats]
    total: int
    #: every matching epoch by status (completed, aborted, pending, damaged), when asked
    counts: dict[str, int] = field(default_factory=dict)


def _decided(st: EpochStats) -> bool:
    return st.status in ("completed", "aborted") and st.source in ("epoch", "history")


def epoch_row(epochs: EpochReader, epoch_id: int, per_task: bool, has_files: bool,
              cache: SummaryCache = CACHE) -> EpochStats:
    """One listed epoch's statistics at the least cost (see the module's docstring)."""
    storage, layout = epochs.storage, epochs.layout
    st = cache.get(storage, layout, epoch_id, "epoch" if has_files else "history")
    if st is not None:
        return st
    st = read_summary(storage, layout, epoch_id) if has_files else None
    complete = st is not None or per_task  # a summary holds the per-task figures
    if st is None:
        st = any_epoch_stats(epochs, epoch_id, per_task, has_files)
        if st.source == "epoch" and _decided(st) and per_task:
            write_summary(storage, layout, st)  # for every later reader (5.7)
    if _decided(st) and (complete or st.source == "history"):
        cache.put(storage, layout, st, "epoch" if has_files else "history")
    return st


def list_epochs(epochs: EpochReader, limit: int = 50, lineage: str | None = None,
                per_task: bool = False, offset: int = 0,
                cache: SummaryCache = CACHE, count: bool = False) -> EpochListing:
    """Epochs that still have files and failed epochs kept in the history, newest first,
    ``offset`` rows skipped. An epoch with damaged documents is listed as ``damaged``,
    never dropped or fatal. With ``count``, every matching epoch is read (decided ones from
    ``cache`` after the first time) and counted by status, for a page's header."""
    with_files = set(epochs.epoch_ids())
    ids = sorted(with_files | set(history_ids(epochs.storage, epochs.layout)),
                 reverse=True)
    opening = {o.epoch_id: o for o in epochs.registry().open}

    def row(epoch_id: int) -> EpochStats:
        st = epoch_row(epochs, epoch_id, per_task, epoch_id in with_files, cache)
        entry = opening.get(epoch_id)
        if st.source == "damaged" and entry is not None:  # its barrier is being written
            st.status, st.lineage, st.run_id = "pending", entry.lineage, entry.run_id or ""
            st.created_at, st.detail = entry.created_at, "opening: no barrier yet"
        return st

    if lineage is None and not count:
        return EpochListing([row(e) for e in ids[offset:offset + limit]], len(ids))
    matching = [st for st in (row(e) for e in ids) if lineage is None or st.lineage == lineage]
    counts: dict[str, int] = {}
    for st in matching:
        counts[st.status] = counts.get(st.status, 0) + 1
    return EpochListing(matching[offset:offset + limit], len(matching), counts if count else {})


def listing_row(st: EpochStats, manifest: Manifest | None) -> JsonObject:
    """One epoch of a listing as the CLI's ``--json`` and the REST API give it: the
    epoch's statistics without the per-task rows, plus ``max_attempt`` (the highest
    attempt of any task: a killed and retried epoch is not a clean one) and ``tables``
    (the table version each table output got from the epoch, 6.12)."""
    row = st.to_json()
    row["max_attempt"] = max((t["attempts"] or 0 for t in row.pop("tasks")),
                             default=0) or None
    row["tables"] = published_tables(manifest, st.epoch_id) or dict(st.tables)
    return row
