"""What source jobs share: finding raw files not yet consumed, and refusing unreadable
ones before Spark parses them."""

from __future__ import annotations

from checkpointing.storage import Storage


def changed_files(storage: Storage, prefix: str, consumed: dict[str, str],
                  until: str | None = None) -> tuple[dict[str, str], list[str], list[str]]:
    """(current offsets {key: content id}, keys new or changed since ``consumed``, keys
    whose content changed). The content id is the object's etag (md5 on local storage).

    ``until`` (an ISO date) bounds the input: a file named for that day or later belongs to
    a later epoch and is neither read nor recorded, so that a backfill's run for day D never
    consumes D+1's file. Late files for earlier days are still picked up.
    """
    current = {}
    for info in storage.list(prefix):
        if not info.key.endswith(".csv"):
            continue
        if until is not None and _file_day(info.key) >= until:
            continue
        current[info.key] = info.etag.strip('"') or storage.head(info.key).etag
    new = sorted(k for k, v in current.items() if consumed.get(k) != v)
    replaced = sorted(k for k in new if k in consumed)
    return current, new, replaced


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
