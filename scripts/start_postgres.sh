#!/usr/bin/env bash
# PostgreSQL for the tests that run Airflow on the database users deploy: installs Debian's
# server when absent, starts the cluster when it is down, and creates the role and database
# the tests use (idempotent). Prints the SQLAlchemy URL.
set -euo pipefail
PGPORT=${CKPT_TEST_PG_PORT:-5432}
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  echo "installing Debian's postgresql..." >&2
  $SUDO apt-get install -y -q postgresql >/dev/null 2>&1 || {
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q postgresql >/dev/null
  }
fi
read -r ver cluster port status _ < <(pg_lsclusters --no-header | head -1)
if [ -z "${ver:-}" ]; then
  echo "error: no PostgreSQL cluster found (pg_lsclusters is empty)" >&2
  exit 1
fi
if [ "$port" != "$PGPORT" ]; then
  echo "error: PostgreSQL cluster $ver/$cluster listens on $port, not $PGPORT (set CKPT_TEST_PG_PORT)" >&2
  exit 1
fi
if [ "$status" != "online" ]; then
  # pg_ctlcluster talks on stdout ("Removed stale pid file."); callers capture stdout as the
  # URL, so its chatter goes to stderr.
  $SUDO pg_ctlcluster "$ver" "$cluster" start >&2
fi
psql_as_postgres() {
  if [ "$(id -un)" = postgres ]; then psql -p "$PGPORT" -qtA "$@"
  elif [ "$(id -u)" -eq 0 ]; then su postgres -c "psql -p $PGPORT -qtA $(printf '%q ' "$@")"
  else sudo -u postgres psql -p "$PGPORT" -qtA "$@"; fi
}
if [ "$(psql_as_postgres -c "select 1 from pg_roles where rolname='ckpt'")" != 1 ]; then
  psql_as_postgres -c "create role ckpt login password 'ckpt'"
fi
# Test modules that run at the same time each get a database of their own (bench/harness/pg.py).
if [ "$(psql_as_postgres -c "select rolcreatedb from pg_roles where rolname='ckpt'")" != t ]; then
  psql_as_postgres -c "alter role ckpt createdb"
fi
if [ "$(psql_as_postgres -c "select 1 from pg_database where datname='ckpt_airflow'")" != 1 ]; then
  psql_as_postgres -c "create database ckpt_airflow owner ckpt"
fi
echo "postgresql+psycopg2://ckpt:ckpt@127.0.0.1:$PGPORT/ckpt_airflow"
