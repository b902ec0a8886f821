"""Installed the way Airflow users install providers (issue 28), proven from the artefact,
not the repository: the standard build front-end builds the sdist and the wheel from a copy
of the tree; a fresh virtual environment gets Airflow and the wheel with the extras a
connect-mode worker needs (`[connect,delta]`: the Spark Connect client, no JVM), pinned by
requirements.txt (Airflow's published constraints file is not reachable from here); then,
with no checkout on sys.path, `airflow providers list` and `airflow plugins` show the
provider and its page, and a user's DAG that is not in the repository (docs/JOBS.md's
worked example) runs under `airflow dags test` against the test session's Spark Connect
server: its published tables equal the independent pandas computation.

Run by `make test-package` (CI runs it after `make test`): the fresh environment takes
minutes to install."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from checkpointing import Coordinator, LocalStorage
from tests.airflow_standalone import connect_env
from tests.system.test_user_pipeline import check, readings_file

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(".venv", ".tools", ".git", "node_modules", "__pycache__",
                                ".demo", ".cluster", "*.egg-info", "build", "dist",
                                "spark-warehouse", ".pytest_cache", ".ruff_cache")


def _pins(*names: str, file: str = "requirements.txt") -> list[str]:
    """The pins of ``names`` in ``file`` (the tested version set)."""
    pins = {}
    for line in (ROOT / file).read_text().splitlines():
        req = line.split("#")[0].strip()
        if "==" in req:
            pins[req.split("==")[0].split("[")[0].lower()] = req
    return [pins[n] for n in names]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("package")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    r = subprocess.run([sys.executable, "-m", "build", "-o", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheel = next((tmp / "dist").glob("dag_checkpoints-*.whl"))
    assert next((tmp / "dist").glob("dag_checkpoints-*.tar.gz"))
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    pip = [str(env_dir / "bin/python"), "-m", "pip", "install", "-q"]
    r = subprocess.run(pip + [f"{wheel}[connect,delta]", *_pins(
        "apache-airflow", "apache-airflow-providers-amazon", "pyspark-client",
        "apache-airflow-providers-apache-spark", "deltalake", "pandas", "pyarrow",
        "boto3", "botocore"), *_pins("duckdb", "duckdb-ext-delta", "polars",
                                     file="requirements-dev.txt")],
        capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return env_dir


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


def test_the_readme_dag_and_its_readers_with_the_wheel(venv, spark_connect, tmp_path):
    """The README's DAG file and its reading block, as written, in the fresh environment:
    two days of click files, one `airflow dags test` a day, then delta-rs, polars and
    DuckDB's delta extension (offline, from its PyPI package) read the published table; the
    page totals each prints equal an independent count of the files' rows."""
    import pandas as pd

    from tests.system.test_readme_commands import _block

    home, dags = tmp_path / "home", tmp_path / "dags"
    dags.mkdir()
    (dags / "clickstream.py").write_text(_block("README.md", "from datetime import datetime"))
    raw = tmp_path / "data" / "raw" / "clicks"
    raw.mkdir(parents=True)
    clicks = []
    for i, day in enumerate(("2024-01-01", "2024-01-02")):
        rows = [{"day": day, "page": f"/p{(i + k) % 3}", "user": k} for k in range(7 + i)]
        clicks += rows
        (raw / f"{day}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = _env(venv, home, AIRFLOW__CORE__DAGS_FOLDER=str(dags),
               CKPT_STORAGE=f"file://{tmp_path}/ckpt", CKPT_DATA=f"file://{tmp_path}/data",
               **connect_env(spark_connect))
    cwd = tmp_path
    assert _airflow(venv, env, "db", "migrate", cwd=cwd).returncode == 0
    # Two daily runs: between them every file is consumed once.
    for run in ("2024-01-02", "2024-01-03"):
        r = _airflow(venv, env, "dags", "test", "clickstream", run, cwd=cwd)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert Coordinator(LocalStorage(tmp_path / "ckpt"), "clickstream").latest_completed() == 2
    want = pd.DataFrame(clicks).groupby("page").size().to_dict()
    code = _block("README.md", "import glob").replace("/data/", f"{tmp_path}/data/")
    r = subprocess.run([str(venv / "bin/python"), "-c", code], env=_env(venv, home), cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    # Each reader's table shows every page with its total: delta-rs (the rows), polars and
    # DuckDB (the sums).
    for page, n in want.items():
        assert out.count(page) >= 3, (page, out)
        assert re.search(rf"{re.escape(page)}\D+{n}\b", out), (page, n, out)
