"""A file source's offsets, for any job that consumes files landed under a prefix: which
files are new since the previous epoch's offsets, kept as Spark's file source keeps its seen
files (a window of about a week behind the newest one, not the whole history), and, with a
:class:`SeenIndex`, which of them rewrite a file consumed long ago (a correction older than
the window), at a cost per epoch that follows the change: the index is read and rewritten
only in the buckets of the files an epoch consumes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from checkpointing.storage import ObjectInfo, Storage

#: How far behind the newest consumed file a file's last-modified time may be for its key
#: to stay in the offsets (Spark's file source: ``maxFileAge``, 7 days by default).
MAX_FILE_AGE_SECONDS = 7 * 86400.0


@dataclass(frozen=True)
class NewInput:
    """What a source epoch consumes: its offsets to record, and the files to read.

    ``offsets`` is ``{"files": {key: content id}, "newest_modified": ts, "max_age_seconds":
    s}``, as Spark's file source keeps its seen files: only files modified within
    ``max_age_seconds`` of the newest consumed one are listed; an older file is consumed by
    definition. The offsets therefore hold about a week of files, not the whole history.
    """

    offsets: dict[str, Any]
    new: list[str]  # keys new or changed since the previous offsets
    replaced: list[str]  # listed in the previous offsets with other content
    #: new keys named for a day already consumed and not in the previous offsets: a late
    #: file, or a file rewritten after it aged out of them (its rows may be in the state)
    late: list[str]
    #: each new key's size in bytes, from the same listing
    sizes: dict[str, int] = field(default_factory=dict)


@dataclass
class SeenIndex:
    """Every file a source ever consumed, ``key -> content id``, in buckets by the month
    the file is named for (``2013-01``; ``undated`` for other names), as Spark's file
    source keeps a compacted log of its seen files. Buckets are loaded when a key of theirs
    is looked up and rewritten only when an entry changed, so an epoch reads and writes the
    buckets of the files it lists outside the window and consumes: one or two months, not
    the history. ``load(bucket)`` returns the stored bucket (None when there is none)."""

    load: Callable[[str], dict[str, str] | None]
    suffix: str = ".csv"
    _buckets: dict[str, dict[str, str]] = field(default_factory=dict)
    #: buckets with an entry added or changed, to be stored again
    changed: set[str] = field(default_factory=set)

    def bucket(self, key: str) -> str:
        day = _file_day(key, self.suffix)
        return day[:7] if day else "undated"

    def _entries(self, key: str) -> dict[str, str]:
        b = self.bucket(key)
        if b not in self._buckets:
            self._buckets[b] = dict(self.load(b) or {})
        return self._buckets[b]

    def get(self, key: str) -> str | None:
        return self._entries(key).get(key)

    def record(self, key: str, content_id: str) -> None:
        entries = self._entries(key)
        if entries.get(key) != content_id:
            entries[key] = content_id
            self.changed.add(self.bucket(key))

    def loaded(self) -> set[str]:
        return set(self._buckets)

    def documents(self) -> dict[str, bytes]:
        """The changed buckets, serialised (sorted keys: the same content, the same
        bytes, so an unchanged bucket is referenced, not stored again)."""
        return {b: json.dumps({"files": dict(sorted(self._buckets[b].items()))},
                              separators=(",", ":")).encode() for b in sorted(self.changed)}

    @staticmethod
    def parse(data: bytes) -> dict[str, str]:
        return dict(json.loads(data)["files"])


def new_input(storage: Storage, prefix: str, previous: dict[str, Any] | None,
              until: str | None = None,
              max_age_seconds: float = MAX_FILE_AGE_SECONDS,
              suffix: str = ".csv", index: SeenIndex | None = None,
              listing: Iterable[ObjectInfo] | None = None) -> NewInput:
    """The files under ``prefix`` ending in ``suffix`` not consumed by the offsets
    ``previous`` (a source's last offsets). Offsets of earlier versions are read too:
    ``{"files": {key: etag}}`` of every file consumed, or ``{"files": [key, ...]}`` (keys
    only: such a file counts as consumed whatever its content now).

    ``until`` (an ISO date) bounds the input: a file named for that day or later belongs to
    a later epoch and is neither read nor recorded, so that a backfill's run for day D never
    consumes D+1's file. Late files for earlier days are still picked up: their
    last-modified time is when they landed. The content id is the object's etag; on local
    storage (no etag in listings) it is the md5, computed only for files inside the window
    whose size and mtime (kept in the offsets' ``stamps``) changed since they were hashed.

    ``index`` (a :class:`SeenIndex`): a listed file that the window's offsets do not hold
    is looked up there, so that a rewrite of a file consumed before the window is
    ``replaced``, not new; every file consumed and in the window is recorded in it.

    ``listing``: the objects under ``prefix`` to consider (an epoch's pinned listing);
    default: ``storage``'s listing now.
    """
    previous = previous or {}
    files = previous.get("files") or {}
    # "" = consumed, content unknown (a key-only list): never taken for a replaced file.
    seen: dict[str, str] = (dict(files) if isinstance(files, dict)
                            else dict.fromkeys(files, ""))
    newest = float(previous.get("newest_modified") or 0.0)
    horizon = newest - max_age_seconds if newest else float("-inf")
    last_day = max((_file_day(k, suffix) for k in seen), default="")
    old_stamps: dict[str, str] = dict(previous.get("stamps") or {})
    stamps: dict[str, str] = {}
    listed: dict[str, tuple[str, float]] = {}
    sizes: dict[str, int] = {}
    for info in storage.list(prefix) if listing is None else listing:
        if not info.key.endswith(suffix):
            continue
        if until is not None and _file_day(info.key, suffix) >= until:
            continue
        if info.last_modified < horizon and info.key not in seen:
            continue  # older than the window: consumed before it (Spark's maxFileAge rule)
        etag = info.etag.strip('"')
        if not etag:  # a filesystem: no etag in its listing
            # Hashing a file is the cost of reading it (1.7 GB of TPC-H history in the
            # window each epoch): a file whose size and mtime are those recorded with its
            # content id keeps it, as rsync's quick check does.
            stamps[info.key] = f"{info.size}:{info.last_modified!r}"
            if seen.get(info.key) and old_stamps.get(info.key) == stamps[info.key]:
                etag = seen[info.key]
            else:
                etag = storage.head(info.key).etag
        listed[info.key] = (etag, info.last_modified)
        sizes[info.key] = info.size
    if index is not None:  # consumed before the window? (a correction of an old file)
        for k in listed:
            if k not in seen and (old := index.get(k)) is not None:
                seen[k] = old
    new = sorted(k for k, (etag, _) in listed.items()
                 if k not in seen or (seen[k] and seen[k] != etag))
    replaced = [k for k in new if k in seen]
    late = [k for k in new
            if k not in seen and _file_day(k, suffix) and _file_day(k, suffix) <= last_day]
    newest = max([newest, *(m for _, m in listed.values())])
    window = {k: etag for k, (etag, m) in sorted(listed.items())
              if m >= newest - max_age_seconds}
    if index is not None:
        for k in new:
            index.record(k, listed[k][0])
        for k, etag in window.items():  # consumed by an earlier version without an index
            index.record(k, etag)
    offsets: dict[str, Any] = {"files": window, "newest_modified": newest,
                               "max_age_seconds": max_age_seconds}
    if stamps:
        offsets["stamps"] = {k: stamps[k] for k in window if k in stamps}
    return NewInput(offsets, new, replaced, late, {k: sizes[k] for k in new})


def _file_day(key: str, suffix: str = ".csv") -> str:
    """The day a file is named for (``.../YYYY-MM-DD.csv``); other names sort first, so
    that an unbounded dimension file is never held back."""
    stem = key.rsplit("/", 1)[-1][:-len(suffix)]
    return stem if len(stem) == 10 and stem[4] == "-" and stem[7] == "-" else ""
