"""`make demo`'s script: it brings up MinIO and Airflow, lands data, runs the pipeline and
shows the epochs completing; Ctrl-C stops what it started, and nothing else. Bad setups
get one clear line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.airflow_standalone import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _demo(tmp: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """The demo script with its state in ``tmp`` (never the developer's .demo/)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "scripts/demo.py"), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "DEMO_DIR": str(tmp / "demo"),
             **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_demo_runs_epochs_and_sighup_stops_everything(tmp_path):
    """The default demo (local storage, tasks on a Spark Connect server) runs a day of the
    example pipelines (airport_ontime triggered by flights_daily's table), which publish
    Delta tables it lists with their versions; closing
    its terminal (SIGHUP) stops Airflow, its task processes and the Spark Connect server:
    nothing carrying the demo's marker is left, and its ports are free again."""
    port, connect_port = free_port(), free_port()
    demo_id = f"test-{os.getpid()}-{time.time_ns()}"
    p = _demo(tmp_path, "--days", "1", "--port", str(port), "--connect-port",
              str(connect_port), env={"CKPT_DEMO_ID": demo_id})
    out, deadline = [], time.time() + 900
    try:
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            out.append(line)
            # The three example pipelines published their Delta tables (listed with
            # versions); airport_ontime's run follows flights_daily's table commit.
            listed = {ln.split()[0] for ln in out if ln.lstrip().startswith("gold_")}
            if len(listed) == 5:
                break
        text = "".join(out)
        assert "runs finished" in text and "1/1" in text, text[-3000:]
        listed = {ln.split()[0]: ln.split()[1] for ln in out if ln.lstrip().startswith("gold_")}
        assert {"gold_route_stats", "gold_carrier_stats", "gold_flights_enriched",
                "gold_aircraft_utilisation", "gold_airport_ontime"} <= set(listed), \
            text[-3000:]
        assert all(v == "v1" for v in listed.values()), listed  # one epoch: version 1
        assert "route_stats v1" in text  # the epoch's row names the versions it published
        assert f"http://127.0.0.1:{port}" in text and "admin /" in text
        assert "completed" in text
        assert not _port_free(connect_port), "no Spark Connect server listens"
        assert _marked(demo_id), "the demo's processes do not carry its marker"
    finally:
        p.send_signal(signal.SIGHUP)
        rest, _ = p.communicate(timeout=120)
    assert p.returncode == 0, rest[-2000:]
    assert "stopping the demo" in rest
    # Processes the demo killed may take a moment to be reaped: poll, with a deadline.
    deadline = time.time() + 15
    while _marked(demo_id) and time.time() < deadline:
        time.sleep(0.2)
    assert _marked(demo_id) == [], "processes the demo started are still running"
    assert _port_free(port) and _port_free(connect_port), \
        "something the demo started still listens"


def _marked(demo_id: str) -> list[int]:
    needle = f"CKPT_DEMO_ID={demo_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_busy_port_is_one_clear_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = _demo(tmp_path, "--local", "--port", str(port), "--days", "1")
        out, _ = p.communicate(timeout=300)
    assert p.returncode == 2
    assert f"demo: error: port {port} (Airflow UI) is busy" in out, out[-2000:]


def test_missing_java_is_one_clear_line(tmp_path):
    p = _demo(tmp_path, "--local", env={"PATH": "/nonexistent"})
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 2
    assert out.strip().splitlines()[-1].startswith("demo: error: Java 17 or newer is required")


def test_port_check_ignores_time_wait_but_not_a_listener():
    """A stopped demo leaves its sockets in TIME_WAIT for a minute: not busy. A process
    listening on the port: busy, with one line naming it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts/demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(1)
    with pytest.raises(demo.DemoError, match=f"port {port} .* is busy"):
        demo.check_port_free(port, "Airflow")
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end of the port goes to TIME_WAIT
    client.close()
    server.close()
    ss = subprocess.run(["ss", "-tan", f"sport = :{port}"], capture_output=True, text=True)
    assert "TIME-WAIT" in ss.stdout, ss.stdout
    demo.check_port_free(port, "Airflow")  # does not raise
