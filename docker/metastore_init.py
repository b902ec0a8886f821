"""Creates the database of Spark's metastore on the deployment's PostgreSQL (idempotent):
the one CKPT_METASTORE_URL names (``jdbc:postgresql://host[:port]/db``), with the user and
password of CKPT_METASTORE_USER and CKPT_METASTORE_PASSWORD, and its tables (as Hive's
schematool would); the begin step of an epoch reads them to find a table input named in
Spark's catalog."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

import psycopg2
from psycopg2 import sql


def main() -> int:
    url = os.environ.get("CKPT_METASTORE_URL", "")
    if not url.startswith("jdbc:postgresql://"):
        print("metastore-init: CKPT_METASTORE_URL is not a jdbc:postgresql: URL; nothing to "
              "create", file=sys.stderr)
        return 0
    parts = urlsplit(url[len("jdbc:"):])
    name = parts.path.lstrip("/")
    try:
        conn = psycopg2.connect(host=parts.hostname, port=parts.port or 5432,
                                dbname="postgres", user=os.environ.get("CKPT_METASTORE_USER"),
                                password=os.environ.get("CKPT_METASTORE_PASSWORD"))
    except psycopg2.OperationalError as exc:
        print(f"metastore-init: PostgreSQL at {parts.hostname} cannot be reached: "
              f"{str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if cur.fetchone() is None:
            cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}")
    conn.close()
    # Its tables too: created lazily by Spark's Hive client, the first CREATE TABLE on
    # PostgreSQL deadlocks (spark_jobs.runtime.metastore_schema).
    from spark_jobs.runtime.metastore_schema import MetastoreSchemaError, ensure_schema

    try:
        ensure_schema(url)
    except MetastoreSchemaError as exc:
        print(f"metastore-init: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
