"""What the flights source jobs share: refusing unreadable raw files before Spark parses
them (which files are new is the runtime's :func:`~spark_jobs.runtime.new_input`)."""

from __future__ import annotations

from checkpointing.storage import Storage

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
