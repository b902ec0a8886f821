"""Installed the way Airflow users install providers, proven from the artefact,
not the repository: the standard build front-end builds the sdist and the wheel from a copy
of the tree; a fresh virtual environment gets Airflow and the wheel with the extras a
connect-mode worker needs (`[connect,delta]`: the Spark Connect client, no JVM) under
constraints.txt (the tested pins), by the tutorial's own install block; then,
with no checkout on sys.path, `airflow providers list` and `airflow plugins` show the
provider and its page, and a user's DAG that is not in the repository (docs/JOBS.md's
worked example) runs under `airflow dags test` against the test session's Spark Connect
server: its published tables equal the independent pandas computation. The tutorial's own
DAG runs, from the same environment, in tests/system/test_tutorial.py.

Run by `make test-package` (CI runs it after `make test`): the fresh environment takes
minutes to install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import date, timedelta
from pathlib import Path

import pytest

from bench.harness.airflow_standalone import connect_env
from checkpointing import Coordinator, LocalStorage
from tests.system.test_user_pipeline import check, readings_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def venv(tutorial) -> Path:
    return tutorial / "venv"


def _env(venv: Path, home: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "CKPT_", "PYTHON", "VIRTUAL_ENV"))}
    return {**keep, "PATH": f"{venv}/bin:/usr/bin:/bin", "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "SPARK_LOCAL_IP": "127.0.0.1",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db", **extra}


def _airflow(venv: Path, env: dict[str, str], *args: str, cwd: Path):
    return subprocess.run([str(venv / "bin/airflow"), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def test_no_full_pyspark_and_no_checkout_in_the_environment(venv, tmp_path):
    r = subprocess.run([str(venv / "bin/python"), "-c", """
import importlib.util, json, sys
import checkpointing, dag_checkpoints, spark_jobs.runtime
import os, pyspark
print(json.dumps({"jvm": importlib.util.find_spec("py4j") is not None or os.path.isdir(
                      os.path.join(os.path.dirname(pyspark.__file__), "jars")),
                  "gx": importlib.util.find_spec("great_expectations") is not None,
                  "files": [checkpointing.__file__, dag_checkpoints.__file__]}))
"""], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=_env(venv, tmp_path / "home"))
    assert r.returncode == 0, r.stderr[-2000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["jvm"] is False and found["gx"] is False, found  # the Connect client only
    assert all("site-packages" in f and str(ROOT) not in f for f in found["files"]), found


def test_the_wheel_runs_a_user_dag_in_connect_mode(venv, spark_connect, tmp_path):
    home, dags = tmp_path / "home", tmp_path / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "docs/examples/energy_daily.py", dags / "energy_daily.py")
    data = LocalStorage(tmp_path / "data")
    days = [date(2024, 1, d) for d in (1, 2)]
    for i, d in enumerate(days):
        data.write(f"raw/readings/{d}.csv", readings_file(d, seed=i))
    env = _env(venv, home, AIRFLOW__CORE__DAGS_FOLDER=str(dags),
               CKPT_STORAGE=f"file://{tmp_path}/ckpt", CKPT_DATA=f"file://{tmp_path}/data",
               **connect_env(spark_connect))
    cwd = tmp_path  # not the repository: nothing of the checkout is importable
    r = _airflow(venv, env, "db", "migrate", cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    providers = _airflow(venv, env, "providers", "list", "-o", "json", cwd=cwd)
    assert providers.returncode == 0, providers.stderr[-2000:]
    assert "dag-checkpoints" in {p["package_name"] for p in json.loads(providers.stdout)}
    plugins = _airflow(venv, env, "plugins", "-o", "json", cwd=cwd)
    assert plugins.returncode == 0, plugins.stderr[-2000:]
    assert "dag_checkpoints" in plugins.stdout and "Epochs" in plugins.stdout, plugins.stdout
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "energy_daily")
    for d in days:
        run = (d + timedelta(days=1)).isoformat()
        r = _airflow(venv, env, "dags", "test", "energy_daily", run, cwd=cwd)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        check(c, data, run)
    assert c.latest_completed() == 2
