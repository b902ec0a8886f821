"""PostgreSQL for the tests that run Airflow on the database users deploy: the server that
scripts/start_postgres.sh starts (``make test`` runs it and passes its URL in
CKPT_TEST_PG_URL), and a fresh database per test module, so that modules running at the
same time never share Airflow's schema."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pg_url() -> str:
    """The URL of the tests' database on the running server (started here if needed)."""
    url = os.environ.get("CKPT_TEST_PG_URL", "").strip()
    if url:
        # The last line: a URL captured from a noisy script must not carry its chatter.
        return url.splitlines()[-1]
    r = subprocess.run([str(ROOT / "scripts/start_postgres.sh")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"PostgreSQL is not available: {r.stderr.strip()}"
    return r.stdout.strip().splitlines()[-1]


def fresh_database(name: str) -> str:
    """Drop and create database ``name`` (owned by the tests' role); its SQLAlchemy URL."""
    import psycopg2

    base = pg_url()
    dsn = base.replace("postgresql+psycopg2://", "postgresql://")
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return base.rsplit("/", 1)[0] + f"/{name}"


def airflow_database(name: str) -> dict[str, str]:
    """The settings of an Airflow whose metadata database is a fresh PostgreSQL database
    ``name`` (LocalExecutor), as users deploy it. A deployment whose test drives it with
    concurrent writes needs it: on SQLite one writer holds the file's lock, and under
    `make test`'s load a REST write waited past the 30 s busy timeout behind the scheduler
    and was refused ("Database error"), leaving a held run that the module's next tests
    queued behind."""
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": fresh_database(name),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor"}
