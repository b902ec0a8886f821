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

from tests.airflow_standalone import free_port

ROOT = Path(__file__).resolve().parent.parent
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


def test_demo_runs_epochs_and_ctrl_c_stops_everything(tmp_path):
    port, s3_port = free_port(), free_port()
    p = _demo(tmp_path, "--days", "1", "--port", str(port), "--s3-port", str(s3_port))
    out, deadline = [], time.time() + 900
    try:
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            out.append(line)
            if "runs finished" in line and "1/1" in line:
                break
        text = "".join(out)
        assert "runs finished" in text and "1/1" in text, text[-3000:]
        assert f"http://127.0.0.1:{port}" in text and "admin /" in text
        assert "completed" in text
    finally:
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=120)
    assert p.returncode == 0, rest[-2000:]
    assert "stopping the demo" in rest
    time.sleep(2)
    assert _port_free(port) and _port_free(s3_port), "something the demo started still listens"


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
