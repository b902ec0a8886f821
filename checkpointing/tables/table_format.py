"""What a table format's module implements, typed: a committer (phase two of table outputs,
PROTOCOL 6.12), VACUUM under the retention rule (6.13) and a table-input reader (6.14).

Each format module (:mod:`checkpointing.tables.delta`, :mod:`checkpointing.tables.iceberg`)
declares one :class:`TableFormat` as ``FORMAT``; :mod:`checkpointing.tables.format_registry`
finds it by name, so nothing else imports a format's library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from checkpointing.protocol.table_formats import FormatTraits
from checkpointing.protocol.table_inputs import ChangeSet, TableInput, TableVersion
from checkpointing.tables.spec import TableCommitter, TableSpec, TableVacuum

if TYPE_CHECKING:  # pyarrow comes with the table extras: imported where it is used
    import pyarrow as pa




class TableReader(Protocol):
    """A format's table-input reader (PROTOCOL 6.14): pins a version, reads the change
    between two and describes the table at one. Every method is given the input's
    declaration and the S3 endpoint (None: the default)."""

    def pin_version(self, spec: TableInput, endpoint_url: str | None) -> TableVersion:
        """The table's newest version."""
        ...

    def version_before(self, spec: TableInput, version: int,
                       endpoint_url: str | None) -> TableVersion:
        """The version just before ``version`` (a ``starting_version``'s start)."""
        ...

    def committed_version(self, spec: TableInput, committed: int,
                          endpoint_url: str | None) -> TableVersion:
        """A manifest's recorded ``table_version`` as a reader's version."""
        ...

    def schema_at(self, spec: TableInput, version: TableVersion,
                  endpoint_url: str | None) -> pa.Schema:
        """The table's schema at ``version``."""
        ...

    def log_partition_columns(self, spec: TableInput, version: TableVersion,
                              endpoint_url: str | None) -> list[str]:
        """The partition columns whose values the log holds, not the files."""
        ...

    def read_changes(self, spec: TableInput, start: TableVersion | None, end: TableVersion,
                     endpoint_url: str | None) -> ChangeSet:
        """The change set of (``start``, ``end``]; ``start`` None: the whole table."""
        ...


class Vacuum(Protocol):
    """A format's VACUUM of one table output, keeping the versions ``protected`` epochs
    committed and files younger than ``min_retention_hours`` (6.13)."""

    def __call__(self, output: str, spec: TableSpec, pipeline_id: str, protected: set[int],
                 endpoint: str | None, min_retention_hours: int,
                 dry_run: bool) -> TableVacuum: ...


@dataclass(frozen=True)
class TableFormat:
    """A format's implementation: its traits, committer, VACUUM and reader."""

    traits: FormatTraits
    committer_type: Callable[[str | None], TableCommitter]
    vacuum: Vacuum
    reader: TableReader

    def committer(self, endpoint_url: str | None) -> TableCommitter:
        return self.committer_type(endpoint_url)
