"""Catalog names for Delta outputs: a table output declared with ``name='schema.table'`` is
registered in Spark's session catalog, so that SQL users and BI tools find it by name
(``SELECT ... FROM gold.carrier_stats VERSION AS OF 3``, ``DESCRIBE HISTORY``) in any
session over the same metastore (CKPT_METASTORE_URL, :func:`~.spark_conf.metastore_conf`).

The registration is an external table over the table's location: the catalog holds the
name and the location, the Delta log holds everything else, so each epoch's commit is
visible under the name with no catalog write. The task that stages an output registers it
(Spark is there; the commit step has no Spark), creating the table's version 0 first when
the table is new, as its first commit would; a later epoch whose restored handle had the
output under the same name and location makes no catalog request (RunOutputs._register).
A name already registered at another location is refused, naming it.
"""

from __future__ import annotations

import logging
from typing import Any

from checkpointing.tables.metastore import project_uri
from checkpointing.tables.spec import TableSpec

from .session import spark_uri

log = logging.getLogger("spark_jobs.runtime.catalog")


class CatalogNameError(ValueError):
    """A table output's catalog name is taken by another table, or the session has no
    persistent catalog to register it in."""


def register(spark: Any, spec: TableSpec, schema_json: str,
             endpoint_url: str | None = None) -> bool:
    """Register Delta output ``spec`` under ``spec.name`` unless it is registered; True
    when this call registered it. Nothing for an output without a name."""
    from checkpointing.protocol.table_formats import traits

    if not spec.name or not traits(spec.format).spark_catalog_named:
        return False
    location = spark_uri(spec.location)
    if spark.catalog.tableExists(spec.name):
        _check_location(spark, spec.name, location)
        return False
    if spark.conf.get("spark.sql.catalogImplementation", "in-memory") != "hive":
        raise CatalogNameError(
            f"table output {spec.name!r}: this Spark's catalog is in memory and forgets the "
            "name when the Spark stops: set CKPT_METASTORE_URL for every Spark the project "
            "starts (and the Connect server)")
    from checkpointing.tables.delta import ensure_created

    ensure_created(spec, schema_json, endpoint_url)
    schema = spec.name.split(".")[0]
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{schema}`")
    # No columns: Delta reads them from the log, and writes no commit for the registration.
    spark.sql(f"CREATE TABLE IF NOT EXISTS {_quoted(spec.name)} USING delta "
              f"LOCATION '{_literal(location)}'")
    _check_location(spark, spec.name, location)  # a racing task may have named another
    log.info("table output registered as %s", spec.name)
    return True


def _check_location(spark: Any, name: str, location: str) -> None:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {_quoted(name)}").collect()
    found = next((str(r[1]) for r in rows if str(r[0]).strip() == "Location"), None)
    # as the catalog and the output may each spell it (file:/x, file:///x, s3a://, s3://)
    if found is None or project_uri(found) != project_uri(location):
        # The location is not named: task failures reach logs and alerts, storage paths not.
        raise CatalogNameError(f"catalog name {name!r} is registered at another location "
                               "than this output's: rename the output, or drop the catalog "
                               "entry")


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def _literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
