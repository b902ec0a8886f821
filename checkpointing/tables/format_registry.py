"""Each table format's implementation, found by name: the only place that picks a format's
module. A format module (:mod:`.delta`, :mod:`.iceberg`) declares ``FORMAT``, a
:class:`~checkpointing.tables.table_format.TableFormat`: its committer (phase two of table
outputs, PROTOCOL 6.12), its VACUUM under the retention rule (6.13) and its table-input
reader (6.14). Each is imported on use: each needs its format's library, installed as an
extra."""

from __future__ import annotations

from collections.abc import Callable

from checkpointing.protocol.table_formats import traits
from checkpointing.tables.table_format import TableFormat


def _delta() -> TableFormat:
    from checkpointing.tables.delta import FORMAT

    return FORMAT


def _iceberg() -> TableFormat:
    from checkpointing.tables.iceberg import FORMAT

    return FORMAT


_LOADERS: dict[str, Callable[[], TableFormat]] = {"delta": _delta, "iceberg": _iceberg}


def implementation(fmt: str) -> TableFormat:
    """Format ``fmt``'s implementation (ValueError naming the formats for another)."""
    traits(fmt)
    return _LOADERS[fmt]()
