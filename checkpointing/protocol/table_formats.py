"""What distinguishes the table formats, as data: each format's traits, in one place.

Code that must behave differently per format asks for a trait here (or, for behaviour that
needs the format's own library, goes through :mod:`checkpointing.tables.format_registry` to
the format's module); nothing else compares a format's name. This module
imports no format library, so the declarations (:class:`~.tables.TableSpec`,
:class:`~.table_inputs.TableInput`) can use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: a name in Spark's built-in catalog: ``schema.table``, plain identifiers (it goes into SQL)
SPARK_CATALOG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class FormatTraits:
    """How a table format differs, as far as this library is concerned."""

    name: str
    #: identified in a catalog by ``namespace.table`` (its location is the catalog's)
    catalog_named: bool
    #: the files keep their partition columns (else the log holds their values and the
    #: ``<column>=<value>`` directories carry them)
    partition_columns_in_files: bool
    #: how a staged partition column's directory is named: ``<prefix><column>=<value>``
    partition_dir_prefix: str
    #: how a staged output's schema is written in its state handle: ``delta-json`` (Delta's
    #: JSON schema) or ``arrow-ipc`` (the Arrow schema, IPC, base64)
    schema_encoding: str
    #: an asset event's ``version`` orders like the barrier's pins (a table version; an
    #: Iceberg event names a snapshot id, which orders nothing)
    event_versions_ordered: bool
    #: an output may be named in Spark's built-in catalog (``schema.table``, 1.18), and a
    #: table input by its name there (1.19)
    spark_catalog_named: bool = False


TRAITS = {
    "delta": FormatTraits("delta", catalog_named=False, partition_columns_in_files=False,
                          partition_dir_prefix="", schema_encoding="delta-json",
                          event_versions_ordered=True, spark_catalog_named=True),
    "iceberg": FormatTraits("iceberg", catalog_named=True, partition_columns_in_files=True,
                            partition_dir_prefix="p_", schema_encoding="arrow-ipc",
                            event_versions_ordered=False),
}
FORMATS = tuple(TRAITS)


def traits(fmt: str) -> FormatTraits:
    """The traits of format ``fmt``; ValueError naming the formats for another."""
    try:
        return TRAITS[fmt]
    except KeyError:
        raise ValueError(f"table format must be one of {', '.join(FORMATS)}, "
                         f"not {fmt!r}") from None
