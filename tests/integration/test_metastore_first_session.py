"""A local Spark session that is the first to use a fresh PostgreSQL metastore: its first
CREATE TABLE hung for ever (DataNucleus creating ``TBL_PRIVS`` behind its own open
transaction) unless the metastore's tables were made before. The session makes them
itself, so a named table is created and read back by its name. (That a second session
finds it is the PostgreSQL-metastore test in test_spark_lakehouse.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from spark_jobs.runtime import spark_session

spark = spark_session("first-on-the-metastore")
spark.sql("CREATE SCHEMA IF NOT EXISTS bronze")
spark.sql(f"CREATE TABLE bronze.first (id BIGINT) USING delta LOCATION '{sys.argv[1]}'")
spark.sql("INSERT INTO bronze.first SELECT id FROM range(7)")
print("rows", spark.table("bronze.first").count())
spark.stop()
"""


def test_a_local_session_first_on_a_fresh_postgresql_metastore_creates_a_table(tmp_path):
    from sqlalchemy.engine import make_url

    from bench.harness.pg import fresh_database

    db = make_url(fresh_database("metastore_first_session"))
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "CKPT_METASTORE_URL": f"jdbc:postgresql://{db.host}:{db.port or 5432}/{db.database}",
           "CKPT_METASTORE_USER": db.username or "",
           "CKPT_METASTORE_PASSWORD": db.password or ""}
    made = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "first")], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    assert "rows 7" in made.stdout
