"""A throwaway Airflow home (SQLite) pointing at the project's dags/ and plugins/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


#: The LocalExecutor's workers started from a forkserver that imported what a checkpointed
#: task needs first (dag_checkpoints.task.preload; README "Deploying"): every task process forks
#: with the job runtime, the Spark Connect client and the flights pipeline's GX imported.
PRELOAD_ENV = {"AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
               "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD":
                   "dag_checkpoints.task.preload,great_expectations"}


def sqlite_url(home: Path) -> str:
    """The SQLAlchemy URL of an Airflow metadata database in SQLite, ``home/airflow.db``,
    with a 30 s busy timeout: pysqlite's 5 s default let a write that waited behind another
    under `make test`'s load fail as Airflow's 500 "Database error" (a REST call or a task's
    state update lost). Not WAL mode: there a read transaction that turns into a write after
    another writer committed fails at once ("database is locked", no busy wait), and Airflow
    3.3's backfill creation, which commits its backfill row before its runs, then answered
    503 and left the backfill half made (the retry: 409 "already a running backfill")."""
    return f"sqlite:///{home / 'airflow.db'}?timeout=30"


def airflow_env(home: Path, preload: bool = True, **extra: str) -> dict[str, str]:
    """The environment of an Airflow on ``home`` (SQLite) with the project's DAGs and
    plugins; ``preload``: the recommended forkserver preload (:data:`PRELOAD_ENV`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sqlite_url(home),
        "AIRFLOW__CORE__PARALLELISM": "4",
        # A task's supervisor gives the execution API 5 s per call by default; an api-server
        # starved of CPU beside a Spark session answered the "task started" call later than
        # that five times running once, and the run's three tasks failed without starting.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        # The dag-processor parses a changed DAG file at once (newest first, whatever this
        # interval); parsing the unchanged ones again every 30 s was most of an idle
        # standalone's CPU: 19.4 CPU-s in 2 minutes, 12.0 with this.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(ROOT),
        # the suite's drills inject faults; a deployment has them off
        "AIRFLOW__DAG_CHECKPOINTS__DRILLS": "True",
        **(PRELOAD_ENV if preload else {}),
    })
    env.update(extra)
    return env


def airflow(env: dict[str, str], *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def migrate(env: dict[str, str]) -> None:
    r = airflow(env, "db", "migrate", timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed: {r.stderr[-2000:]}")
