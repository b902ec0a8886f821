"""Delta table inputs named in Spark's session catalog (PROTOCOL 6.14, 1.19): the location
the catalog holds for ``schema.table``, read when an epoch begins.

Spark's built-in catalog keeps a table's name and location in a Hive metastore, the one
every Spark of the deployment is given (CKPT_METASTORE_URL). The step that begins an epoch
runs in Airflow, without Spark, so it reads the metastore's own database: PostgreSQL,
through SQLAlchemy. For a data source table (``USING delta``) Spark keeps the location
among the table's storage properties (``path``); a Hive table keeps it in its storage
descriptor. The barrier records the location found, so that every task and every retry of
the epoch reads the same table even if the name is moved meanwhile.

An embedded Derby metastore belongs to the one Spark that opened it and cannot be read
from another process: a table input named there is refused in one line, as is a name
without a metastore, a name the catalog does not know, and a table that is not Delta.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from checkpointing.protocol.table_inputs import TableInputError

if TYPE_CHECKING:  # SQLAlchemy is imported where a metastore is read
    from sqlalchemy.engine import URL

#: the metastore every Spark of the deployment shares, and its credentials
METASTORE_ENV = "CKPT_METASTORE_URL"
USER_ENV, PASSWORD_ENV = "CKPT_METASTORE_USER", "CKPT_METASTORE_PASSWORD"

# Hive's metastore schema (as Spark's Hive client creates it): the name, its storage
# descriptor, the data source table's ``path`` and provider. Identifiers are upper case.
_LOCATION = """
SELECT s."LOCATION", p."PARAM_VALUE", t."TBL_TYPE",
       (SELECT tp."PARAM_VALUE" FROM "TABLE_PARAMS" tp
         WHERE tp."TBL_ID" = t."TBL_ID" AND tp."PARAM_KEY" = 'spark.sql.sources.provider')
  FROM "TBLS" t
  JOIN "DBS" d ON d."DB_ID" = t."DB_ID"
  LEFT JOIN "SDS" s ON s."SD_ID" = t."SD_ID"
  LEFT JOIN "SERDE_PARAMS" p ON p."SERDE_ID" = s."SERDE_ID" AND p."PARAM_KEY" = 'path'
 WHERE d."NAME" = :schema AND t."TBL_NAME" = :table
"""


class TableNames(Protocol):
    """Where a catalog name of a Delta table lives (a table URI)."""

    def location_of(self, name: str) -> str: ...


@dataclass(frozen=True)
class MetastoreNames:
    """Reads Spark's session catalog from its metastore's database (PostgreSQL).

    :param url: the metastore's JDBC URL, as every Spark is given it
        (``jdbc:postgresql://host[:port]/db``).
    """

    url: str | None
    user: str | None = None
    password: str | None = None

    @classmethod
    def from_env(cls) -> MetastoreNames:
        return cls(os.environ.get(METASTORE_ENV) or None, os.environ.get(USER_ENV) or None,
                   os.environ.get(PASSWORD_ENV) or None)

    def location_of(self, name: str) -> str:
        schema, _, table = name.lower().partition(".")
        url = self._sqlalchemy_url(name)
        import sqlalchemy

        engine = sqlalchemy.create_engine(url, pool_pre_ping=False)
        try:
            with engine.connect() as conn:
                row = conn.execute(sqlalchemy.text(_LOCATION),
                                   {"schema": schema, "table": table}).first()
        except sqlalchemy.exc.SQLAlchemyError as exc:
            # The driver's own error, in one line: it names the host, never the password.
            cause = getattr(exc, "orig", None) or exc
            raise TableInputError(f"table input {name!r}: Spark's metastore cannot be read: "
                                  f"{type(cause).__name__}: {_first_line(cause)}") from None
        finally:
            engine.dispose()
        if row is None:
            raise TableInputError(f"table input {name!r}: no such table in Spark's catalog "
                                  "(CKPT_METASTORE_URL's metastore)")
        sd_location, path, table_type, provider = row
        if provider is not None and provider.lower() != "delta":
            raise TableInputError(f"table input {name!r} is a {provider} table in Spark's "
                                  "catalog, not Delta")
        location = path or sd_location
        if not location or "__PLACEHOLDER__" in location:
            raise TableInputError(f"table input {name!r}: Spark's catalog holds no location "
                                  f"for it ({table_type})")
        return project_uri(location)

    def _sqlalchemy_url(self, name: str) -> URL:
        if not self.url:
            raise TableInputError(
                f"table input {name!r} names a table in Spark's catalog, but no metastore "
                f"is configured: set {METASTORE_ENV} (a PostgreSQL metastore) where epochs "
                "begin, or name the input by its location")
        if self.url.startswith("jdbc:derby:"):
            raise TableInputError(
                f"table input {name!r} names a table in an embedded Derby metastore, which "
                "only the Spark that opened it can read: use a PostgreSQL metastore "
                f"({METASTORE_ENV}=jdbc:postgresql://host/db), or name the input by its "
                "location")
        if not self.url.startswith("jdbc:postgresql://"):
            raise TableInputError(f"table input {name!r}: {METASTORE_ENV} must be a "
                                  "jdbc:postgresql: URL to be read where epochs begin")
        import sqlalchemy

        parts = urlsplit(self.url[len("jdbc:"):])
        # SQLAlchemy quotes the user and password itself (and masks the password in text)
        return sqlalchemy.engine.URL.create(
            "postgresql+psycopg2", username=self.user, password=self.password,
            host=parts.hostname, port=parts.port, database=parts.path.lstrip("/"))


def project_uri(location: str) -> str:
    """A location as the catalog spells it (``file:/x``, ``s3a://b/x``), as table inputs
    spell it (``file:///x``, ``s3://b/x``), without a trailing '/'."""
    location = location.rstrip("/")
    if location.startswith("file:"):
        return "file:///" + location[len("file:"):].lstrip("/")
    if location.startswith("s3a://"):
        return "s3://" + location[len("s3a://"):]
    return location


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return re.sub(r"password=\S+", "password=***", line)[:240]
