"""What loading the provider costs an Airflow process that does not serve its API: every
Airflow process imports the provider's package (its configuration entry point), and the
scheduler, the dag-processor, the triggerer and ``airflow dags test`` load its plugin (its
listeners); only the API server mounts the REST API."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.harness.airflow_env import airflow_env

#: modules a process that loads the plugin without serving its API must not import: the
#: REST API (FastAPI and Airflow's API security), the operators, the view planner's
#: SQL parser
NOT_LOADED = ("dag_checkpoints.server.api", "fastapi", "dag_checkpoints.operators",
              "checkpointing.ivm", "sqlglot")

LOAD_AS_A_SCHEDULER = """
import json, sys
import airflow
from airflow.listeners.listener import get_listener_manager
from airflow.plugins_manager import get_fastapi_plugins

listeners = get_listener_manager()
before = sorted(m for m in sys.modules if m.startswith(NOT_LOADED))
apps, _ = get_fastapi_plugins()
ours = [a for a in apps if a["name"] == "DAG checkpoints"]
print(json.dumps({"before_api": before, "listeners": listeners.has_listeners,
                  "prefix": [a["url_prefix"] for a in ours],
                  "app": [type(a["app"]).__name__ for a in ours]}))
"""


def test_a_process_loading_the_plugin_imports_its_api_only_when_asked_for_it(tmp_path):
    env = airflow_env(tmp_path / "airflow")
    code = f"NOT_LOADED = {NOT_LOADED!r}\n{LOAD_AS_A_SCHEDULER}"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["listeners"] is True  # the plugin was loaded: its listeners are registered
    assert got["before_api"] == [], got["before_api"]
    # ... and the API server, asking for the plugin's apps, gets the REST API at /ckpt
    assert got["prefix"] == ["/ckpt"] and got["app"] == ["FastAPI"], got


def test_the_package_serves_each_public_name_from_its_own_module():
    """The package's names are imported on first use; each is its defining module's own
    object, and a name the package does not define fails as any missing attribute does."""
    import importlib

    import dag_checkpoints
    import pytest

    for name in dag_checkpoints.__all__:
        value = getattr(dag_checkpoints, name)
        home = importlib.import_module(value.__module__)
        assert getattr(home, name) is value, name
        assert value.__module__.startswith("dag_checkpoints."), (name, value.__module__)
    with pytest.raises(AttributeError, match="no attribute 'check_master_reachable'"):
        dag_checkpoints.check_master_reachable  # noqa: B018
    assert set(dag_checkpoints.__all__) <= set(dir(dag_checkpoints))
