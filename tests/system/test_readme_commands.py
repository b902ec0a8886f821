"""Every command the README and docs/JOBS.md show works on a clean clone: each `make`
target exists (make -n), the quick paths run as written (the flights pipeline's shell lines,
with its /tmp paths moved into a temporary directory), and every other fenced block is run
here or says, in BLOCKS, which test runs it or why none can."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the documents whose blocks are run or listed here (PROTOCOL.md's examples are checked by
#: tests/unit/test_protocol_conformance.py)
GUIDES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs/guides").glob("*.md"))
DOCS = ["README.md", "docs/tutorial.md", *GUIDES, "docs/reference.md",
        "docs/JOBS.md", "docs/concepts.md", "docs/performance.md", "docs/testing.md",
        "docs/METRICS.md"]
README = "\n".join((ROOT / d).read_text() for d in DOCS)


def test_every_make_target_in_the_readme_exists():
    targets = sorted(set(re.findall(r"(?:^|`)make ([a-z][a-z0-9_-]*)", README, re.M)))
    assert {"demo", "test"} <= set(targets), targets
    for t in targets:
        r = subprocess.run(["make", "-n", t], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, f"make {t}: {r.stderr.strip()}"


@pytest.mark.slow
def test_flights_quick_path_runs_as_written(tmp_path):
    section = README[README.index("## The flights pipeline"):]
    block = section.split("```")[1]
    lines = [x.strip() for x in block.replace("\\\n", " ").strip().splitlines()]
    assert len(lines) == 3, lines
    bindir = Path(sys.executable).parent
    for line in lines:
        line = re.sub(r"\[[^\]]*\]", "", line)  # optional arguments in brackets
        line = line.replace("/tmp/", f"{tmp_path}/").replace("python -m",
                                                            f"{sys.executable} -m")
        line = re.sub(r"^ckpt ", f"{bindir}/ckpt ", line.strip())
        r = subprocess.run(line, shell=True, cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env={"PATH": f"{bindir}:/usr/bin:/bin",
                                             "SPARK_LOCAL_IP": "127.0.0.1",
                                             "HOME": str(tmp_path)})
        assert r.returncode == 0, f"{line}\n{r.stderr[-2000:]}"
    assert "completed" in r.stdout, r.stdout


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("doc", DOCS)
def test_every_python_block_is_python(doc):
    """The README's and JOBS.md's Python blocks parse (most are fragments of a job or a
    DAG file, run for real by the examples they quote: docs/examples/energy_daily.py by
    tests/system/test_user_pipeline.py, dags/aircraft_utilisation.py by test_aircraft_dag.py);
    an ellipsis stands for the user's own code."""
    import ast
    import textwrap

    blocks = _python_blocks((ROOT / doc).read_text())
    if doc in ("README.md", "docs/JOBS.md", "docs/guides/own-dag.md", "docs/reference.md"):
        assert blocks, doc  # the pages that show code do show some
    for block in blocks:
        ast.parse(textwrap.dedent(block))


def test_jobs_md_reading_recipe_runs(tmp_path):
    """JOBS.md's "Reading a published output from outside", run as written against a Delta
    table this project committed (its location put in)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from checkpointing import Coordinator, LocalStorage, SnapshotWriter
    from checkpointing.protocol.barrier import TaskPlan
    from checkpointing.tables.spec import TableSpec

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    loc = f"{tmp_path}/tables/energy_daily_usage"
    for n in (1, 2):
        b = c.begin_epoch({"t": TaskPlan((), True)}, f"r{n}")
        c.register_attempt(b.epoch_id, "t", 1)
        w = SnapshotWriter(c.storage, c.layout, b.epoch_id, "t", 1)
        path = tmp_path / f"part-{n}.parquet"
        pq.write_table(pa.table({"site": ["north"], "kwh": [float(n)]}), path)
        w.stage_table_output("energy_daily_usage", TableSpec(f"file://{loc}", "overwrite"),
                             [path])
        c.acknowledge(b.epoch_id, "t", 1, w.handle())
        c.complete(b.epoch_id)
    text = (ROOT / "docs/JOBS.md").read_text()
    block = text[text.index("### Reading a published output from outside"):]
    code = _python_blocks(block)[0].replace("s3://bucket/tables/energy_daily_usage", loc) \
        .replace("version=7", "version=1")  # epoch 1's version here
    lines = [ln.split("#")[0].strip() for ln in code.strip().splitlines()]
    scope: dict = {}
    exec(lines[0], scope)  # the import
    latest, earlier = (eval(ln, scope) for ln in lines[1:])  # noqa: S307 - our own doc
    assert latest["kwh"].tolist() == [2.0] and earlier["kwh"].tolist() == [1.0]


# ---------------------------------------------------------------------------- every block
TUTORIAL = "tests/system/test_tutorial.py (test_the_tutorial_in_order)"
#: Every fenced block of the README and JOBS.md, by its first line: the test that runs it
#: here, or why it cannot run here. A new block fails the test below until it is listed.
BLOCKS: dict[tuple[str, str], str] = {
    ("README.md", "make demo"): "run: test_every_make_target_in_the_readme_exists (make -n); "
    "the demo itself, one day, by " + TUTORIAL,
    ("README.md", "Airflow DAG run ──►"): "not code: a diagram",
    ("docs/reference.md", "from checkpointing import Coordinator"): "run: test_readme_blocks_run",
    ("docs/reference.md", "ckpt [--storage URI]"): "run: test_readme_blocks_run (each "
    "command listed is one `ckpt --help` knows)",
    ("docs/reference.md", "python -m spark_jobs.flights.landing"):
        "run: test_flights_quick_path_runs_as_written",
    ("docs/reference.md", "python -m spark_jobs.tpch.landing"):
    "run by tests/integration/test_tpch.py: the same landing tool at scale factor 0.01 "
    "and the same `spark_jobs.runtime.run_epoch` command with --until, on the tests' "
    "Spark Connect server (--remote)",
    ("docs/guides/own-dag.md", "pip install 'dag-checkpoints"):
    "network install into an Airflow image: "
    "the wheel with its extras is installed from scratch by tests/package/test_wheel.py",
    ("docs/guides/own-dag.md", "from datetime import datetime"):
    "a DAG file fragment: parsed here; "
    "dags/flights_daily.py, which it quotes, runs in test_airflow_dags.py",
    ("docs/guides/own-dag.md", "ingest = CheckpointedSparkOperator("):
    "a DAG file fragment: parsed here; "
    "run as part of dags/flights_daily.py",
    ("docs/guides/tables.md", "from spark_jobs.runtime import JobResult, TableSpec"):
    "a job fragment: "
    "parsed here; spark_jobs/flights/stats.py, which it quotes, runs in test_spark_jobs.py",
    ("docs/guides/tables.md", "from deltalake import DeltaTable"): "run: test_readme_blocks_run",
    ("README.md", "import glob"): "run: test_readme_reading_recipe_runs (a Delta table, read "
    "by delta-rs, polars and DuckDB's delta extension offline); and in a fresh environment "
    "with the wheel, on the README DAG's own table, by " + TUTORIAL,
    ("README.md", "from datetime import datetime"): "a DAG file: docs/examples/clickstream.py "
    "(tests/unit/test_docs.py keeps them equal), run with the wheel in a fresh environment by "
    + TUTORIAL,
    ("docs/tutorial.md", ".venv/bin/python -m build"): "run as written (the clone's "
    "interpreter, /tmp/tutorial moved) by the tests' tutorial fixture (tests/conftest.py), "
    "which " + TUTORIAL + " and tests/package/ share",
    ("docs/tutorial.md", ".venv/bin/python -m spark_jobs.runtime.connect_server start"):
    "run as written (a free port) by " + TUTORIAL,
    ("docs/tutorial.md", "mkdir -p /tmp/tutorial/dags"): "run as written (/tmp/tutorial "
    "moved, a free Connect port) by " + TUTORIAL,
    ("docs/tutorial.md", "import glob"): "run as written by " + TUTORIAL,
    ("docs/guides/index.md", "make demo"): "run: test_every_make_target_in_the_readme_exists "
    "(make -n); the demo itself, one day, by " + TUTORIAL,
    ("docs/reference.md", "Airflow DAG run ──►"): "not code: a diagram",
    ("docs/tutorial.md", "make demo"): "run as `make demo ARGS=...` (one day, free "
    "ports) by " + TUTORIAL,
    ("docs/tutorial.md", "{\"checkpoint\": {\"fault_inject\""): "a run conf: triggered "
    "with it on the demo's printed date by " + TUTORIAL,
    ("docs/guides/troubleshooting.md", "table output 'gold.daily': this Spark's catalog"):
    "messages: tests/integration/test_spark_lakehouse.py raises both (test_a_catalog_name_"
    "without_a_metastore_is_refused_in_one_line, and the catalog test's name at another "
    "location)",
    ("docs/guides/tables.md", "GOLD = TableSpec(\"s3://lake/gold/carrier_stats\""):
    "a declaration: a named output is registered and read by name by "
    "tests/integration/test_spark_lakehouse.py (test_a_delta_output_is_found_by_its_catalog_"
    "name_from_a_fresh_session)",
    ("docs/guides/tables.md", "table_inputs={\"orders\": TableInput(name=\"bronze.orders\")}"):
    "a declaration: tests/integration/test_spark_lakehouse.py (test_table_inputs_named_in_"
    "spark_s_catalog_over_a_postgresql_metastore) reads inputs declared so",
    ("docs/guides/tables.md", "export CKPT_METASTORE_URL="):
    "a deployment's settings (a path and a database of the reader's): the embedded kind is "
    "what test_spark_lakehouse.py's catalog test configures",
    ("docs/guides/tables.md", "SELECT * FROM gold.carrier_stats VERSION AS OF 3;"):
    "SQL in a Spark over the metastore: test_spark_lakehouse.py's catalog test runs both "
    "statements by name from a fresh Spark",
    ("docs/guides/tables.md", "export PYICEBERG_CATALOG__CKPT__TYPE=sql"):
    "run: test_readme_blocks_run "
    "(with a SQLite catalog in place of the PostgreSQL one)",
    ("docs/guides/tables.md", "from pyiceberg.catalog import load_catalog"):
    "run: test_readme_blocks_run",
    ("docs/guides/tables.md", "SELECT * FROM ckpt.gold.route_stats VERSION AS OF"):
    "SQL in a Spark over the shared Iceberg catalog: test_iceberg_tables.py's fresh-session "
    "test runs VERSION AS OF, TIMESTAMP AS OF and the snapshots table by catalog name",
    ("docs/guides/views.md", "from airflow.sdk import task"):
    "run as written in a DAG: tests/unit/dag_checkpoints/operators/test_views.py "
    "(test_the_guide_s_views_are_two_view_tasks)",
    ("docs/guides/views.md", "ckpt views explain --sql"):
    "run: tests/unit/test_ivm_planner.py (test_the_guide_s_explain_block_prints_what_it_shows)",
    ("docs/guides/views.md", "view over orders: cust, total, top"):
    "the output of the block above, compared by tests/unit/test_ivm_planner.py",
    ("docs/guides/airflow.md", "ingest_flights ──┬──► enrich"): "not code: a diagram",
    ("docs/guides/lineage.md", "AIRFLOW__OPENLINEAGE__TRANSPORT="):
    "a lineage backend's settings: the same HTTP transport, to a local receiver, is set by "
    "tests/system/test_lineage.py",
    ("docs/guides/backfill.md", "AIRFLOW_API_URL=http://localhost:8080"): "needs a running Airflow "
    "api-server and a token: the same command runs in tests/system/test_airflow_cli.py",
    ("docs/JOBS.md", "from spark_jobs.runtime import DeclineEpoch"): "a job fragment: "
    "parsed here; docs/examples/energy_daily.py runs in tests/system/test_user_pipeline.py",
    ("docs/JOBS.md", "touched = {...}"): "a job fragment with the user's own code (...): "
    "parsed here; the same recipe runs in dags/aircraft_utilisation.py (test_aircraft_dag.py)",
    ("docs/JOBS.md", "found = run.new_input(\"raw/readings/\")"): "a job fragment: parsed "
    "here; docs/examples/energy_daily.py runs it in tests/system/test_user_pipeline.py",
    ("docs/JOBS.md", "from deltalake import DeltaTable"): "run: test_jobs_md_reading_recipe_runs",
    ("docs/JOBS.md", "from checkpointing import TableInput"): "a DAG file fragment: parsed "
    "here; dags/airport_ontime.py declares its input the same way (test_airflow_standalone.py)",
    ("docs/JOBS.md", "run.concurrently(lambda: run.write_state("): "a job fragment: parsed "
    "here; spark_jobs/tpch/jobs.py's ingest runs the same call in test_tpch.py, and "
    "test_spark_connect.py runs two writes at once through it",
    ("docs/JOBS.md", "changes = run.table_changes(\"flights\")"): "a job fragment: parsed "
    "here; spark_jobs/flights/airport_ontime.py runs it in test_airflow_standalone.py",
    ("docs/JOBS.md", "from airflow.sdk import dag, task"): "a DAG file: "
    "docs/examples/energy_daily.py, which it quotes, runs in tests/system/test_user_pipeline.py",
    ("docs/JOBS.md", "export AIRFLOW_CONN_SPARK_CONNECT_DEFAULT="): "run: test_readme_blocks_run "
    "(Airflow reads the connection it defines)",
    # docs/guides/troubleshooting.md: each message as the project prints it, and a fix
    ("docs/guides/troubleshooting.md", "cannot open an epoch now:"): "not code: a message "
    "(the begin's refusal; a killed dags test no longer leaves it: test_airflow_dags.py)",
    ("docs/guides/troubleshooting.md", "port 15002 is busy"): "not code: a message "
    "(test_spark_connect.py provokes it)",
    ("docs/guides/troubleshooting.md", "no api-server: pass --api-url"): "not code: messages "
    "of ckpt-airflow (test_airflow_cli.py)",
    ("docs/guides/troubleshooting.md", "export AIRFLOW_API_URL=http://127.0.0.1:8080"):
    "needs a running Airflow api-server and a user: the same command runs in "
    "tests/system/test_airflow_cli.py",
    ("docs/guides/troubleshooting.md", "ckpt: error: pipeline 'flights_daily' has no"):
        "not code: messages ckpt prints (tests/unit/test_cli.py: test_bad_input_is_one_line, "
        "test_unreachable_endpoint_and_missing_config)",
    ("docs/guides/troubleshooting.md", "table input 'orders': 2 file(s) added or removed"):
        "not code: messages a table input's refusals print (tests/integration/"
        "test_delta_histories.py, tests/unit/test_delta_rs_histories.py)",
    ("docs/guides/troubleshooting.md", "route_stats declined epoch 7"): "not code: messages "
    "of declined epochs (test_expected_input.py, test_airflow_failure_paths.py)",
    ("docs/guides/troubleshooting.md", "table input 'orders': the table uses"): "not code: "
    "messages of refused table inputs (test_table_inputs.py)",
    ("docs/guides/troubleshooting.md", "summary: task summary: the job's result"): "not code: "
    "a message (test_spark_connect.py provokes it)",
    ("docs/guides/troubleshooting.md", "CHECKPOINT ALERT checkpoint epoch 12"): "not code: an "
    "alert's log line (test_airflow_timeout.py)",
    ("docs/guides/troubleshooting.md", "fault injection ('route_stats:1')"): "not code: a "
    "message (tests/unit/dag_checkpoints/task/test_drills.py provokes it)",
}


def _blocks(doc: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block of ``doc``."""
    return re.findall(r"```(\w*)\n(.*?)```", (ROOT / doc).read_text(), re.S)


def _block(doc: str, first: str) -> str:
    [text] = [b for _, b in _blocks(doc) if b.strip().startswith(first)]
    return text


def test_every_block_runs_or_says_why_not():
    listed = set(BLOCKS)
    for doc in DOCS:
        for _, text in _blocks(doc):
            keys = [k for k in listed if k[0] == doc and text.strip().startswith(k[1])]
            assert len(keys) == 1, f"{doc}: block {text.strip()[:60]!r} is not listed in " \
                                   "BLOCKS (say which test runs it, or why none can)"
            listed.discard(keys[0])
    assert not listed, f"BLOCKS lists blocks the documents no longer have: {sorted(listed)}"


@pytest.mark.slow
def test_readme_blocks_run(tmp_path, monkeypatch):
    """The README's runnable blocks as written, their locations put in: the coordinator's
    API, the `ckpt` synopsis, reading a Delta and an Iceberg table this project committed,
    and JOBS.md's Spark Connect connection as Airflow reads it."""
    import json
    import os

    from checkpointing import Coordinator, LocalStorage
    from checkpointing.tables.spec import TableSpec
    from tests.support.tables_readers import table_epoch

    # The coordinator's API: one epoch begun, acknowledged by a task, completed.
    state = tmp_path / "ingest-state"
    state.mkdir()
    (state / "counts.json").write_text("{}")
    code = _block("docs/reference.md", "from checkpointing import Coordinator") \
        .replace("s3://my-bucket/checkpoints", f"file://{tmp_path}/ckpt") \
        .replace("/tmp/ingest-state", str(state)).replace('"files": [...]', '"files": []')
    head, commit = code.split("# ... then the commit step:")
    task = head[head.index("# in each task"):]
    scope: dict = {}
    exec(compile(head, "README.md", "exec"), scope)  # noqa: S102 - our own document
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "flights_daily")
    epoch = scope["barrier"].epoch_id
    assert c.missing_tasks(epoch) == ["stats"]
    exec(task.replace('"ingest"', '"stats"'), scope)  # noqa: S102 - the block's other task
    exec(commit, scope)  # noqa: S102
    assert c.status(epoch) == "completed"
    assert sorted(c.completed_handles(epoch)) == ["ingest", "stats"]

    # The ckpt synopsis names only commands the CLI has.
    bindir = Path(sys.executable).parent
    r = subprocess.run([str(bindir / "ckpt"), "--help"], capture_output=True, text=True)
    commands = set(re.findall(r"^  ([a-z]+)", _block("docs/reference.md", "ckpt [--storage URI]"),
                              re.M))
    assert commands >= {"epochs", "show", "verify", "tables"}, commands
    assert all(cmd in r.stdout for cmd in commands), (commands, r.stdout)

    # Reading the tables from outside, as written: a Delta table, then an Iceberg table in
    # a SQL catalog configured by the README's environment variables.
    delta_loc = f"{tmp_path}/tables/daily_revenue"
    rows = [("a", 1, "2013-01-01")]
    tables = Coordinator(LocalStorage(tmp_path / "ckpt-delta"), "tables")
    for n in range(1, 3):
        table_epoch(tables, tmp_path / "stage", TableSpec(f"file://{delta_loc}", "overwrite"),
                    [(k, v * n, d) for k, v, d in rows], f"d{n}")
    code = _block("docs/guides/tables.md", "from deltalake import DeltaTable") \
        .replace("s3://warehouse/tables/daily_revenue", delta_loc).replace("version=12",
                                                                           "version=1")
    lines = [ln for ln in code.strip().splitlines()]
    scope = {}
    exec(lines[0], scope)  # noqa: S102
    latest, first = (eval(ln, scope) for ln in lines[1:])  # noqa: S307 - our own document
    assert latest["value"].tolist() == [2] and first["value"].tolist() == [1]

    env = dict(ln.split(None, 1)[1].split("#")[0].strip().split("=", 1) for ln in
               _block("docs/guides/tables.md",
                      "export PYICEBERG_CATALOG__CKPT__TYPE=sql").splitlines())
    assert set(env) == {"PYICEBERG_CATALOG__CKPT__TYPE", "PYICEBERG_CATALOG__CKPT__URI"}
    monkeypatch.setenv("PYICEBERG_CATALOG__CKPT__TYPE", env["PYICEBERG_CATALOG__CKPT__TYPE"])
    monkeypatch.setenv("PYICEBERG_CATALOG__CKPT__URI", f"sqlite:///{tmp_path}/catalog.db")
    ice = Coordinator(LocalStorage(tmp_path / "ckpt-ice"), "ice")
    spec = TableSpec(f"file://{tmp_path}/wh/gold.route_stats", "overwrite",
                     format="iceberg", name="gold.route_stats", catalog="ckpt")
    table_epoch(ice, tmp_path / "stage-ice", spec, rows, "i1")
    code = _block("docs/guides/tables.md", "from pyiceberg.catalog import load_catalog")
    lines = [ln for ln in code.strip().splitlines() if "snapshot_id=..." not in ln]
    # In a process of its own, as a reader runs it: pyiceberg reads its environment once, at
    # import, and this worker may have imported it under another test's environment.
    r = subprocess.run([sys.executable, "-c", f"{lines[0]}\nprint({lines[1]}['value'].tolist())"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, **env,
                            "PYICEBERG_CATALOG__CKPT__URI": f"sqlite:///{tmp_path}/catalog.db"})
    assert r.returncode == 0 and r.stdout.strip() == "[1]", r.stderr[-2000:]

    # JOBS.md's Spark Connect connection, as Airflow reads it from the environment.
    line = _block("docs/JOBS.md", "export AIRFLOW_CONN_SPARK_CONNECT_DEFAULT=").splitlines()[0]
    name, value = line.split(None, 1)[1].split("=", 1)
    value = value.split("  #")[0].strip().strip("'")
    assert json.loads(value)["conn_type"] == "spark_connect"
    code = ("from airflow.sdk import BaseHook; "
            "c = BaseHook.get_connection('spark_connect_default'); print(c.conn_type, c.host)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, name: value}, timeout=300)
    assert r.returncode == 0 and r.stdout.split()[0] == "spark_connect", r.stderr[-2000:]


def test_readme_reading_recipe_runs(tmp_path, capsys):
    """The README's reading block as written, its path put in: delta-rs, polars and
    DuckDB's delta extension (loaded from its PyPI package, offline) read a Delta table's
    rows."""
    import pandas as pd
    from deltalake import write_deltalake

    loc = tmp_path / "daily_clicks"
    write_deltalake(str(loc), pd.DataFrame({"day": ["2024-01-01"] * 3,
                                            "page": ["/a", "/b", "/a"], "count": [1, 2, 3]}))
    code = _block("README.md", "import glob").replace("/data/tables/daily_clicks", str(loc))
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - our own document
    out = capsys.readouterr().out
    assert "/a" in out and "/b" in out and "4" in out, out

