"""Reading table inputs (PROTOCOL 6.14) through the reader of their format: the version an
epoch pins, and the change set between two versions. Each format's module declares its
:class:`~checkpointing.tables.table_format.TableReader`, found through
:mod:`checkpointing.tables.format_registry`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from checkpointing.json_types import JsonObject
from checkpointing.protocol.table_formats import traits
from checkpointing.protocol.table_inputs import (
    ChangeSet,
    TableInput,
    TableInputError,
    TableVersion,
)
from checkpointing.tables.format_registry import implementation
from checkpointing.tables.table_format import TableReader


def _reader(fmt: str) -> TableReader:
    return implementation(fmt).reader


@contextmanager
def _declining(spec: TableInput) -> Iterator[None]:
    """Every call into a table format's library goes through here: what the library raises
    (I/O, a missing or malformed log or metadata file, a version gone) becomes the one-line
    :class:`TableInputError` that declines the epoch, the table's location replaced by its
    label. A reader's own refusals pass as they are."""
    try:
        yield
    except TableInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the libraries raise plain errors for I/O
        raise TableInputError(f"table input {spec.label!r} ({spec.format}) cannot be read: "
                              f"{type(exc).__name__}: {_first_line(exc, spec)}") from None


def pin(spec: TableInput, endpoint_url: str | None = None) -> TableVersion:
    """The table's newest version: what an epoch beginning now reads up to."""
    with _declining(spec):
        return _reader(spec.format).pin_version(spec, endpoint_url)


def changes(spec: TableInput, start: TableVersion | None, end: TableVersion,
            endpoint_url: str | None = None) -> ChangeSet:
    """The change set of ``spec`` in ``(start, end]``; ``start`` None: the first read, the
    whole table at ``end`` (or the changes from ``spec.starting_version`` on)."""
    with _declining(spec):
        return _changes(_reader(spec.format), spec, start, end, endpoint_url)


def _changes(reader: TableReader, spec: TableInput, start: TableVersion | None,
             end: TableVersion, endpoint_url: str | None) -> ChangeSet:
    if start is None and spec.starting_version is not None:
        if spec.starting_version > end.version + 1:
            raise TableInputError(
                f"table input {spec.label!r}: starting_version {spec.starting_version} is "
                f"after the pinned version {end.version}")
        start = reader.version_before(spec, spec.starting_version, endpoint_url)
    if start is not None and end.version < start.version:
        raise TableInputError(
            f"table input {spec.label!r}: the pinned version {end.version} is older than "
            f"version {start.version}, which the parent epoch consumed (the table was "
            "restored or recreated); restore the task from a savepoint taken before, or "
            "start its state afresh")
    if start is not None and start == end:
        return ChangeSet(start, end, (), (), reader.schema_at(spec, end, endpoint_url),
                         tuple(reader.log_partition_columns(spec, end, endpoint_url)))
    return reader.read_changes(spec, start, end, endpoint_url)


def committed_version(spec: TableInput, committed: int,
                      endpoint_url: str | None = None) -> TableVersion:
    """The version a table commit of this project recorded (a manifest's
    ``table_version``: Delta's version, Iceberg's snapshot id) as a reader's version."""
    with _declining(spec):
        return _reader(spec.format).committed_version(spec, committed, endpoint_url)


def event_version(spec: TableInput, table: JsonObject) -> int | None:
    """The version an asset event's ``table`` extra (what the commit step emits for a
    table output) announces of ``spec``, when it names ``spec`` and its format's
    versions are the ones a barrier pins (Delta's; an Iceberg event names a snapshot
    id, which orders nothing): the least version a run it triggered may read."""
    if table.get("format") != spec.format or table.get("version") is None:
        return None
    same = (table.get("location") == spec.location if spec.name is None else
            (table.get("name"), table.get("catalog", "default")) == (spec.name,
                                                                     spec.catalog))
    ordered = traits(spec.format).event_versions_ordered
    return int(table["version"]) if same and ordered else None


def _first_line(exc: BaseException, spec: TableInput) -> str:
    """The library's message in one line, the table's location replaced by its label: no
    storage path in an error that reaches logs and the Epochs page."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    for where in _location_forms(spec.location):
        line = line.replace(where, f"<{spec.label}>")
    return line[:240]


def _location_forms(location: str | None) -> list[str]:
    if not location:
        return []
    from urllib.parse import unquote, urlparse

    forms = [location]
    if location.startswith("file://"):
        forms.append(unquote(urlparse(location).path))
    if location.startswith(("s3://", "s3a://")):
        forms.append(location.split("://", 1)[1])
    return sorted(forms, key=len, reverse=True)
