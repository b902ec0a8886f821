"""What source jobs share: finding raw files not yet consumed, and refusing unreadable
ones before Spark parses them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpointing.storage import Storage

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


def new_input(storage: Storage, prefix: str, previous: dict[str, Any] | None,
              until: str | None = None,
              max_age_seconds: float = MAX_FILE_AGE_SECONDS) -> NewInput:
    """The raw files under ``prefix`` not consumed by the offsets ``previous`` (a source's
    last offsets; ``{"files": {...}}`` of earlier versions lists every file consumed).

    ``until`` (an ISO date) bounds the input: a file named for that day or later belongs to
    a later epoch and is neither read nor recorded, so that a backfill's run for day D never
    consumes D+1's file. Late files for earlier days are still picked up: their
    last-modified time is when they landed. The content id is the object's etag; on local
    storage (no etag in listings) it is the md5, computed only for files inside the window.
    """
    previous = previous or {}
    seen: dict[str, str] = dict(previous.get("files") or {})
    newest = float(previous.get("newest_modified") or 0.0)
    horizon = newest - max_age_seconds if newest else float("-inf")
    last_day = max((_file_day(k) for k in seen), default="")
    listed: dict[str, tuple[str, float]] = {}
    for info in storage.list(prefix):
        if not info.key.endswith(".csv"):
            continue
        if until is not None and _file_day(info.key) >= until:
            continue
        if info.last_modified < horizon and info.key not in seen:
            continue  # older than the window: consumed before it (Spark's maxFileAge rule)
        listed[info.key] = (info.etag.strip('"') or storage.head(info.key).etag,
                            info.last_modified)
    new = sorted(k for k, (etag, _) in listed.items() if seen.get(k) != etag)
    replaced = [k for k in new if k in seen]
    late = [k for k in new if k not in seen and _file_day(k) and _file_day(k) <= last_day]
    newest = max([newest, *(m for _, m in listed.values())])
    window = {k: etag for k, (etag, m) in sorted(listed.items())
              if m >= newest - max_age_seconds}
    return NewInput({"files": window, "newest_modified": newest,
                     "max_age_seconds": max_age_seconds}, new, replaced, late)


def _file_day(key: str) -> str:
    """The day a raw file is named for (``.../YYYY-MM-DD.csv``); other names sort first,
    so that an unbounded dimension file is never held back."""
    stem = key.rsplit("/", 1)[-1][:-len(".csv")]
    return stem if len(stem) == 10 and stem[4] == "-" and stem[7] == "-" else ""


#: Bytes read from the start of a raw file to check its header.
HEADER_BYTES = 4096


def split_unreadable(storage: Storage, keys: list[str],
                     columns: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Keys whose header matches ``columns``, and (key, reason) of the others: binary,
    not UTF-8, or another header. An unreadable file is quarantined whole."""
    readable, unreadable = [], []
    expected = ",".join(columns)
    for key in keys:
        start = storage.read_start(key, HEADER_BYTES)  # a ranged read: files may be large
        line = start.split(b"\n", 1)[0]  # a header longer than HEADER_BYTES is not ours
        try:
            head = line.decode("utf-8").strip()
        except UnicodeDecodeError:
            unreadable.append((key, "not_utf8"))
            continue
        if head != expected:
            unreadable.append((key, "bad_header"))
        else:
            readable.append(key)
    return readable, unreadable


def quarantine_schema():
    from pyspark.sql import types as T

    return T.StructType([T.StructField("raw", T.StringType()),
                         T.StructField("reason", T.StringType()),
                         T.StructField("source_file", T.StringType())])
