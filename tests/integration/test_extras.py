"""A worker with only some extras installed: without any Spark, a checkpointed
DAG still parses, and what needs Spark fails with one line naming the extra to install;
the same for the table formats' libraries. A package is made absent by a finder that
refuses to import it, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(blocked: set[str], code: str) -> subprocess.CompletedProcess:
    prelude = f"""
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(blocked)!r} or name in {sorted(blocked)!r}:
            raise ImportError(f"No module named {{name!r}}")
sys.meta_path.insert(0, _Absent())
sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "plugins")!r}]
"""
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


def test_without_spark_the_dag_parses_and_the_task_names_the_extra(tmp_path):
    r = _run({"pyspark", "py4j"}, f"""
import importlib.util, os
os.environ["CKPT_STORAGE"] = "file://{tmp_path}/ckpt"
spec = importlib.util.spec_from_file_location("energy_daily",
                                              "docs/examples/energy_daily.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
from airflow.sdk import DAG
dags = [v for v in vars(mod).values() if isinstance(v, DAG)]
print("parsed", [d.dag_id for d in dags], sorted(t.task_id for t in dags[0].tasks))
from spark_jobs.runtime import spark_session
for kw in ({{}}, {{"remote": "sc://127.0.0.1:1"}}):
    try:
        spark_session("t", **kw)
    except ImportError as exc:
        print("error", exc)
""")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0] == ("parsed ['energy_daily'] ['checkpoint_begin', 'checkpoint_commit', "
                        "'checkpoint_timeout', 'daily_usage', 'readings', 'site_records']"), \
        r.stdout
    assert lines[1].startswith("error a local or spark-submit Spark session needs the Python "
                               "package 'py4j.java_gateway'") and \
        "pip install 'dag-checkpoints[spark]'" in lines[1], lines
    assert lines[2].startswith("error a Spark Connect session needs") and \
        "pip install 'dag-checkpoints[connect]'" in lines[2], lines


def test_a_table_output_without_its_library_names_the_extra(tmp_path):
    r = _run({"deltalake", "pyiceberg"}, f"""
from checkpointing.tables.commit import committer
from checkpointing.tables.spec import TableSpec
for spec in (TableSpec("file://{tmp_path}/t"),
             TableSpec("file://{tmp_path}/i", format="iceberg", name="a.b")):
    try:
        committer(spec).commit(spec, "ckpt:p:main:t", 1, (), {{"schema": "x"}})
    except ImportError as exc:
        print(exc)
""")
    assert r.returncode == 0, r.stderr[-3000:]
    delta, iceberg = r.stdout.strip().splitlines()
    assert delta.startswith("a Delta table output needs the Python package 'deltalake'") and \
        delta.endswith("pip install 'dag-checkpoints[delta]' (Delta Lake table outputs "
                       "(delta-rs))"), delta
    assert "pip install 'dag-checkpoints[iceberg]'" in iceberg, iceberg
