"""Creates, on the deployment's PostgreSQL, the databases its catalogs keep (idempotent):

- Spark's metastore: the database CKPT_METASTORE_URL names (``jdbc:postgresql://host[:port]/db``),
  as the user CKPT_METASTORE_USER with CKPT_METASTORE_PASSWORD, and its tables (as Hive's
  schematool would); the begin step of an epoch reads them to find a table input named in
  Spark's catalog;
- each Iceberg SQL catalog pyiceberg is configured with on PostgreSQL
  (``PYICEBERG_CATALOG__<NAME>__URI=postgresql+psycopg2://...``): its database, then its
  tables, made by pyiceberg itself, so that the first epochs of several workers and the
  Connect server's JDBC catalog never race to create them."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

import psycopg2
from psycopg2 import sql


class InitError(Exception):
    """One line for the service's log."""


def create_database(name: str, host: str | None, port: int | None, user: str | None,
                    password: str | None) -> None:
    try:
        conn = psycopg2.connect(host=host, port=port or 5432, dbname="postgres", user=user,
                                password=password)
    except psycopg2.OperationalError as exc:
        raise InitError(f"PostgreSQL at {host} cannot be reached: "
                        f"{str(exc).strip().splitlines()[0]}") from None
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if cur.fetchone() is None:
            cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}")
    conn.close()


def metastore() -> None:
    url = os.environ.get("CKPT_METASTORE_URL", "")
    if not url.startswith("jdbc:postgresql://"):
        print("metastore-init: CKPT_METASTORE_URL is not a jdbc:postgresql: URL; no "
              "metastore to create", file=sys.stderr)
        return
    parts = urlsplit(url[len("jdbc:"):])
    create_database(parts.path.lstrip("/"), parts.hostname, parts.port,
                    os.environ.get("CKPT_METASTORE_USER"),
                    os.environ.get("CKPT_METASTORE_PASSWORD"))
    # Its tables too: created lazily by Spark's Hive client, the first CREATE TABLE on
    # PostgreSQL deadlocks (spark_jobs.runtime.metastore_schema).
    from spark_jobs.runtime.metastore_schema import MetastoreSchemaError, ensure_schema

    try:
        ensure_schema(url)
    except MetastoreSchemaError as exc:
        raise InitError(str(exc)) from None


def iceberg_catalogs() -> None:
    try:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.utils.config import Config
        from sqlalchemy.engine import make_url
    except ImportError:
        return
    for name, props in (Config().config.get("catalog") or {}).items():
        if not isinstance(props, dict) or str(props.get("type", "")).lower() != "sql":
            continue
        url = make_url(str(props.get("uri", "")))
        if url.get_backend_name() != "postgresql" or not url.database:
            continue
        create_database(url.database, url.host, url.port, url.username, url.password)
        try:
            load_catalog(name)  # pyiceberg's SQL catalog creates its tables when missing
        except Exception as exc:  # noqa: BLE001 - named in one line, not a traceback
            raise InitError(f"the Iceberg catalog {name!r} on database {url.database} "
                            f"cannot be made: {type(exc).__name__}") from None
        print(f"Iceberg catalog {name} ready on database {url.database}")


def main() -> int:
    try:
        metastore()
        iceberg_catalogs()
    except InitError as exc:
        print(f"metastore-init: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
