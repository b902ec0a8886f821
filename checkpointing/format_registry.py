"""Each table format's implementation, found by name: the only place that picks a format's
module. A format module (:mod:`.delta`, :mod:`.iceberg`) provides ``FORMAT``, a
:class:`TableFormat`: its committer (phase two of table outputs, PROTOCOL 6.12), its VACUUM
under the retention rule (6.13) and its table-input reader (6.14). Each is imported on use:
each needs its format's library, installed as an extra."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .formats import FormatTraits, traits


class TableFormat(Protocol):
    traits: FormatTraits
    #: the table-input reader (:class:`checkpointing.table_changes.TableReader`)
    reader: Any

    def committer(self, endpoint_url: str | None) -> Any: ...

    def vacuum(self, output: str, spec: Any, pipeline_id: str, protected: set[int],
               endpoint: str | None, min_retention_hours: int, dry_run: bool) -> Any: ...


def _delta() -> TableFormat:
    from .delta import FORMAT

    return FORMAT


def _iceberg() -> TableFormat:
    from .iceberg import FORMAT

    return FORMAT


_LOADERS: dict[str, Callable[[], TableFormat]] = {"delta": _delta, "iceberg": _iceberg}


def implementation(fmt: str) -> TableFormat:
    """Format ``fmt``'s implementation (ValueError naming the formats for another)."""
    traits(fmt)
    return _LOADERS[fmt]()
