"""The tutorial (docs/tutorial.md), followed in order as a newcomer follows it: its command
blocks run as written, the browser's steps through the REST calls the page makes.

1. `make demo` (one day, the test's own ports and directory) runs the example pipelines and,
   once its runs are done, lands the next day and prints the date to trigger.
2. That date, triggered with the tutorial's run conf (a kill of route_stats' first try):
   the epoch completes by attempt 2, and the gold tables equal the oracle over the files.
3. A savepoint, a backfill preview through the page's API, then the tutorial's
   `ckpt-airflow backfill ... --dry-run` line in a terminal, with the printed password.
4. The Delta tables the demo printed, read by delta-rs at their latest and first versions.
5. Ctrl-C stops the demo and frees its Spark Connect port; then the wheel is built and
   installed (the shared install fixture runs that block), a Connect server is started with
   the tutorial's line, the user's DAG runs twice, its table is read by delta-rs, polars
   and DuckDB, and the server is stopped with the tutorial's line.

Run by `make test-package` (it shares the installed wheel with tests/package): the fresh
environment takes minutes to install.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from bench.harness import oracle
from bench.harness.airflow_standalone import free_port
from checkpointing import Coordinator, LocalStorage
from tests.support.tutorial import tutorial_block
from tests.system.test_readme_commands import _block

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = (ROOT / "docs/tutorial.md").read_text()
DAG = "flights_daily"
pytestmark = pytest.mark.slow


class _Lines:
    """A process's output, read by a thread so a wait never blocks on a quiet pipe."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._t.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if m := re.search(pattern, self.text):
                return m
            if self.proc.poll() is not None:
                time.sleep(1)  # the reader thread's last lines
                raise AssertionError(f"the process ended ({self.proc.returncode}) before "
                                     f"{pattern!r}:\n{self.text[-4000:]}")
            time.sleep(1)
        raise AssertionError(f"no {pattern!r} within {timeout}s:\n{self.text[-4000:]}")


class _Api:
    def __init__(self, url: str, password: str):
        self.url = url
        r = requests.post(f"{url}/auth/token", json={"username": "admin", "password": password},
                          timeout=30)
        r.raise_for_status()
        self.headers = {"Authorization": f"Bearer {r.json()['access_token']}"}

    def get(self, path: str) -> requests.Response:
        return requests.get(f"{self.url}{path}", headers=self.headers, timeout=60)

    def post(self, path: str, body: dict) -> requests.Response:
        return requests.post(f"{self.url}{path}", json=body, headers=self.headers, timeout=60)

    def wait_run(self, run_id: str, timeout: float) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}")
            if r.ok and r.json()["state"] in ("success", "failed"):
                return r.json()["state"]
            time.sleep(3)
        raise AssertionError(f"run {run_id} not finished within {timeout}s")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _marked(demo_id: str) -> list[int]:
    """The processes carrying the demo's marker in their environment."""
    needle = f"CKPT_DEMO_ID={demo_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _inline(start: str) -> str:
    """The tutorial's inline command (a `...` span) starting with ``start``, on one line."""
    m = re.search(rf"`({re.escape(start)}[^`]*)`", TUTORIAL)
    assert m, f"the tutorial no longer shows {start!r}"
    return " ".join(m.group(1).split())


def test_the_tutorial_in_order(tutorial, tmp_path):
    if os.environ.get("CKPT_TUTORIAL_FROM_FRESH_CLONE"):
        # .ci/run: the demo must fetch what it needs itself, as on a newcomer's clone
        assert not (ROOT / ".tools/jars").exists() and not (ROOT / ".demo").exists(), \
            "the tutorial must start from what a fresh clone has"
    port, connect_port = free_port(), free_port()
    demo_dir, demo_id = tmp_path / "demo", f"tutorial-{os.getpid()}-{time.time_ns()}"
    # 1. make demo: one day (the page's five take longer), the test's ports and directory.
    demo = subprocess.Popen(
        ["make", "demo", f"ARGS=--days 1 --port {port} --connect-port {connect_port}"],
        cwd=ROOT, env={**os.environ, "DEMO_DIR": str(demo_dir), "CKPT_DEMO_ID": demo_id},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out = _Lines(demo)
    try:
        m = out.wait_for(r"admin / (\S+)\)", 900)
        api = _Api(f"http://127.0.0.1:{port}", m.group(1))
        hint = out.wait_for(r"Next day landed \((\S+)\): trigger flights_daily with logical "
                            r"date (\S+) to run it", 900)
        spare, logical = hint.group(1), hint.group(2)
        assert list((ROOT / ".tools/jars").glob("delta-spark_*.jar")), \
            "the demo ran without fetching Delta's Spark runtime"
        assert (demo_dir / f"data/raw/flights/{spare}.csv").exists()

        # 2. The retry drill: the tutorial's run conf, on the date the demo printed.
        conf = json.loads(tutorial_block("{\"checkpoint\": {\"fault_inject\""))
        r = api.post(f"/api/v2/dags/{DAG}/dagRuns",
                     {"logical_date": f"{logical}T00:00:00Z", "conf": conf})
        assert r.status_code == 200, r.text
        run_id = r.json()["dag_run_id"]
        assert api.wait_run(run_id, 900) == "success", out.text[-3000:]
        epochs = api.get(f"/ckpt/api/dags/{DAG}/epochs").json()["epochs"]
        assert [(e["epoch_id"], e["status"]) for e in epochs] == [(2, "completed"),
                                                                   (1, "completed")]
        detail = api.get(f"/ckpt/api/dags/{DAG}/epochs/2").json()
        tasks = {t["task_id"]: t for t in detail["tasks"]}
        assert tasks["route_stats"]["acked_attempt"] == 2, tasks["route_stats"]
        c = Coordinator(LocalStorage(demo_dir / "ckpt"), DAG)
        assert c.completed_handles(2)["route_stats"].restored_from == {"epoch_id": 1}
        data = LocalStorage(demo_dir / "data")
        for keys, table in ((["origin", "dest"], "gold_route_stats"),
                            (["carrier"], "gold_carrier_stats")):
            oracle.assert_gold_matches_oracle(c, data, keys, table, until=logical)

        # 3. A savepoint, the page's preview, then the terminal's dry run.
        r = api.post(f"/ckpt/api/dags/{DAG}/savepoints", {"name": "tutorial", "epoch_id": 1})
        assert r.status_code == 201, r.text
        r = api.post(f"/ckpt/api/dags/{DAG}/backfills",
                     {"from_savepoint": "tutorial", "first_day": spare, "last_day": spare,
                      "dry_run": True})
        assert r.status_code == 200, r.text
        line = _inline("AIRFLOW_API_URL=")
        assert "--from-epoch 5 --first-day 2013-01-06 --last-day 2013-01-06" in line, line
        # the page's five days have epoch 5 (day 2013-01-05) and the drill's day 2013-01-06
        # after it; the test's one day has epoch 1 (day 2013-01-01) and the drill's day,
        # the landed next day, after it: the same steps in the same order
        line = (line.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
                .replace("<password>", m.group(1)).replace("--from-epoch 5", "--from-epoch 1")
                .replace("2013-01-06", spare))
        r = subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, env={k: v for k, v in os.environ.items()
                                             if not k.startswith("AIRFLOW")})
        assert r.returncode == 0, r.stdout + r.stderr
        preview = json.loads(r.stdout)  # the preview: from epoch 1, the landed day's run
        assert preview["origin"]["epoch_id"] == 1 and preview["conflicts"] == [], preview
        assert preview["runs"] == [{"logical_date": logical, "data_day": spare}], preview

        # 4. The tables the demo printed, by any Delta reader.
        from deltalake import DeltaTable

        out.wait_for(r"(?m)^\s+gold_carrier_delays\s+v\d+", 600)
        _bronze_continued_exactly_once(demo_dir, connect_port)
        printed = dict(re.findall(r"^\s+(gold_\w+)\s+v\d+\s+(\S+)$", out.text, re.M))
        assert {"gold_route_stats", "gold_flights_enriched"} <= set(printed), out.text[-3000:]
        for location in printed.values():
            assert len(DeltaTable(location).to_pandas()) > 0, location
            assert len(DeltaTable(location, version=1).to_pandas()) > 0, location
    finally:
        # 5. Ctrl-C: SIGINT to the terminal's foreground group (make and the demo).
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(timeout=180)
    assert "stopping the demo" in out.text
    deadline = time.time() + 30
    while not (_port_free(port) and _port_free(connect_port)) and time.time() < deadline:
        time.sleep(0.5)
    assert _port_free(port) and _port_free(connect_port), "something the demo started listens"
    while _marked(demo_id) and time.time() < deadline:  # killed processes are reaped late
        time.sleep(0.2)
    assert _marked(demo_id) == [], "processes the demo started are still running"
    _your_own_dag(tutorial, tmp_path)


def _bronze_continued_exactly_once(demo_dir: Path, connect_port: int) -> None:
    """The demo's bronze table, kept by plain Spark (MERGE, DELETE), has deletion vectors;
    carrier_delays' published table equals pandas over Spark's own read of the bronze
    table at the version its latest epoch pinned."""
    from deltalake import DeltaTable

    from checkpointing import read_manifest
    from spark_jobs.runtime import spark_session

    bronze = demo_dir / "data/tables/bronze_flight_status"
    log = "".join(p.read_text() for p in sorted((bronze / "_delta_log").glob("*.json")))
    assert '"deletionVector":{' in log, "the bronze table's DELETE wrote no deletion vector"
    c = Coordinator(LocalStorage(demo_dir / "ckpt"), "carrier_delays")
    epoch = c.latest_completed()
    pinned = c.barrier(epoch).table_version("status").version
    spark = spark_session("tutorial-check", remote=f"sc://127.0.0.1:{connect_port}")
    try:
        rows = (spark.read.format("delta").option("versionAsOf", pinned)
                .load(f"file://{bronze}").toPandas())
    finally:
        spark.stop()
    assert len(rows) > 0
    want = rows.assign(late=(rows["arr_delay"] > 15).astype(int)).groupby("carrier").agg(
        flights=("carrier", "size"), late=("late", "sum"), delay=("arr_delay", "sum"))
    out = read_manifest(c.storage, c.layout).outputs["gold_carrier_delays"]
    got = DeltaTable(out.meta["table"]["location"].removeprefix("file://"),
                     version=int(out.meta["table_version"])).to_pandas().set_index("carrier")
    assert sorted(got.index) == sorted(want.index)
    for carrier, w in want.iterrows():
        g = got.loc[carrier]
        assert (int(g["flights"]), int(g["late"])) == (int(w["flights"]), int(w["late"]))
        assert abs(float(g["delay_minutes"]) - float(w["delay"])) < 1e-6, (carrier, g, w)


def _your_own_dag(tmp: Path, work: Path) -> None:
    """Step 5 as written: the server's start line, the run block, the reading block, the
    stop line (a free port for the page's 15002, /tmp/tutorial moved to ``tmp``)."""
    import pandas as pd

    port = str(free_port())
    put = {"--port 15002": f"--port {port}", '"port": 15002': f'"port": {port}'}
    start = tutorial_block(".venv/bin/python -m spark_jobs.runtime.connect_server start",
                           tmp, **put)
    stop = _inline(".venv/bin/python -m spark_jobs.runtime.connect_server stop") \
        .replace(".venv/bin/python", sys.executable).replace("--port 15002", f"--port {port}")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", start], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and f"sc://127.0.0.1:{port}" in r.stdout, r.stdout + r.stderr
    try:
        src = work / "src"  # docs/examples and no checkout on PATH
        (src / "docs/examples").mkdir(parents=True)
        (src / "docs/examples/clickstream.py").write_text(
            (ROOT / "docs/examples/clickstream.py").read_text())
        script = tutorial_block("mkdir -p /tmp/tutorial/dags", tmp, **put)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AIRFLOW", "CKPT_", "PYTHON", "VIRTUAL_ENV", "AWS_"))}
        env.update(PATH="/usr/bin:/bin", SPARK_LOCAL_IP="127.0.0.1", HOME=str(work))
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=src, env=env,
                           capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        assert re.search(r"^2\s+completed\s", r.stdout, re.M), r.stdout[-2000:]
        rows = [json.loads(ln) for f in sorted((tmp / "data/raw/clicks").glob("*.json"))
                for ln in f.read_text().splitlines()]
        want = pd.DataFrame(rows).groupby("page").size().to_dict()
        assert want == {"/docs": 2, "/home": 2}  # what the tutorial's text says
        readme = _block("README.md", "import glob").replace("/data/", f"{tmp}/data/")
        for code in (tutorial_block("import glob", tmp), readme):  # and the README's recipe
            r = subprocess.run([str(tmp / "venv/bin/python"), "-c", code], cwd=work,
                               capture_output=True, text=True, timeout=300,
                               env={**env, "PATH": f"{tmp}/venv/bin:/usr/bin:/bin"})
            assert r.returncode == 0, r.stderr[-3000:]
            for page, n in want.items():  # delta-rs's rows, polars' and DuckDB's sums
                assert r.stdout.count(page) >= 3, (page, r.stdout)
                assert re.search(rf"{re.escape(page)}\D+{n}\b", r.stdout), (page, n, r.stdout)
        from deltalake import DeltaTable

        table = str(tmp / "data/tables/daily_clicks")
        assert DeltaTable(table).version() == 2  # created empty, then one per epoch
        first = DeltaTable(table, version=1).to_pandas()
        assert set(first["day"]) == {"2024-01-01"}, first  # epoch 1's version
    finally:
        r = subprocess.run(["bash", "-c", stop], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr
    deadline = time.time() + 30
    while not _port_free(int(port)) and time.time() < deadline:
        time.sleep(0.5)
    holders = subprocess.run(["ss", "-ltnp", f"sport = :{port}"], capture_output=True,
                             text=True).stdout
    assert _port_free(int(port)), f"the server's port is still taken:\n{holders}"
