"""The epoch summary (PROTOCOL 5.7): a decided epoch's statistics, written once.

A decided epoch never changes, so what its statistics need (barrier, ``_metadata``, a
listing and every effective acknowledgement: 3 + tasks requests) is read once, by the first
reader that lists it after its decision, and stored as one small document. Listing epochs
then costs one read per decided epoch instead of 3 + tasks, and nothing for an epoch this
process has already read (:class:`SummaryCache`). The decider does not write it: completion
keeps costing the same whatever the number of tasks. The summary is derived data: a reader
that finds it malformed computes the statistics from the epoch's documents.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from checkpointing.errors import CheckpointError, MalformedDocument, PreconditionFailed
from checkpointing.protocol.layout import Layout
from checkpointing.storage import Storage
from checkpointing.views.stats import SUMMARY_CODEC as CODEC
from checkpointing.views.stats import SUMMARY_FORMAT, EpochStats

log = logging.getLogger(__name__)
__all__ = ["CODEC", "SUMMARY_FORMAT", "SummaryCache", "decode_summary", "read_summary",
           "write_summary", "keep_summary"]


def write_summary(storage: Storage, layout: Layout, stats: EpochStats) -> bool:
    """Store a decided epoch's statistics create-once; False when one exists already or
    the write failed (logged: readers compute the statistics instead)."""
    if stats.status not in ("completed", "aborted") or stats.source != "epoch":
        raise ValueError(f"epoch {stats.epoch_id} is {stats.status} ({stats.source}): only a "
                         "decided epoch's own statistics are summarised")
    try:
        storage.create(layout.epoch_summary(stats.epoch_id),
                       CODEC.encode({"stats": stats.to_json()}))
        return True
    except PreconditionFailed:
        return False
    except CheckpointError as exc:
        log.warning("summary of epoch %d not written: %s", stats.epoch_id, exc)
        return False


def keep_summary(storage: Storage, layout: Layout, stats: EpochStats) -> bool:
    """Keep a completed epoch's statistics in its history entry (5.19) before retention
    deletes its files, create-once; False when one is kept already."""
    if stats.status != "completed":
        raise ValueError(f"epoch {stats.epoch_id} is {stats.status}: only a completed "
                         "epoch's summary is kept (an aborted one has its failure record)")
    doc = {**stats.to_json(), "source": "history"}
    try:
        storage.create(layout.kept_summary(stats.epoch_id), CODEC.encode({"stats": doc}))
        return True
    except PreconditionFailed:
        return False


def read_summary(storage: Storage, layout: Layout, epoch_id: int) -> EpochStats | None:
    """The stored summary, or None when there is none or it is malformed (logged)."""
    key = layout.epoch_summary(epoch_id)
    data = storage.read_optional(key)
    if data is None:
        return None
    try:
        stats = decode_summary(data, storage.uri(key))
    except MalformedDocument as exc:
        log.warning("ignoring the summary of epoch %d: %s", epoch_id, exc)
        return None
    return stats if stats.epoch_id == epoch_id else None


def decode_summary(data: bytes, key: str) -> EpochStats:
    """Parse a summary document; MalformedDocument (naming ``key``) when it is not one."""
    return CODEC.decode(data, key)


class SummaryCache:
    """Decided epochs' statistics this process has read, by storage, pipeline and epoch
    (least recently used first out). Only decided epochs enter: they never change."""

    def __init__(self, max_entries: int = 20_000):
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[str, str, int, str], EpochStats] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, storage: Storage, layout: Layout, epoch_id: int,
            kind: str = "epoch") -> EpochStats | None:
        """``kind``: "epoch" for an epoch with files, "history" for a failure record."""
        key = (storage.describe(), layout.pipeline_id, epoch_id, kind)
        with self._lock:
            st = self._items.get(key)
            if st is not None:
                self._items.move_to_end(key)
            return st

    def put(self, storage: Storage, layout: Layout, stats: EpochStats,
            kind: str = "epoch") -> None:
        key = (storage.describe(), layout.pipeline_id, stats.epoch_id, kind)
        with self._lock:
            self._items[key] = stats
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


#: the process's cache (the api-server keeps one across requests)
CACHE = SummaryCache()
