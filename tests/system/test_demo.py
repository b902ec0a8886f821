"""`make demo`'s script: bad setups get one clear line. The demo's run itself (the example
pipelines' epochs, the tables it lists, Ctrl-C stopping everything it started) is the
tutorial's first step: tests/system/test_tutorial.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness.airflow_standalone import free_port

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


def test_a_demo_that_failed_starts_clean_and_says_so(tmp_path):
    """A demo stopped by an error leaves queued runs and state in its directory; the next
    one must not resume them silently (a first epoch showing "Tries 2" with no drill)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (tmp_path / "demo" / "airflow").mkdir(parents=True)
        (tmp_path / "demo" / "airflow" / "queued-run").write_text("from the failed demo")
        first = _demo(tmp_path, "--port", str(port), "--days", "1")
        out, _ = first.communicate(timeout=300)
        assert first.returncode == 2 and "is busy" in out
        assert (tmp_path / "demo" / "airflow" / "queued-run").exists()  # an error wipes nothing
        again = _demo(tmp_path, "--port", str(port), "--days", "1")
        out, _ = again.communicate(timeout=300)
    assert "the last demo stopped on an error: starting clean" in out, out[-2000:]
    assert not (tmp_path / "demo" / "airflow" / "queued-run").exists()


def test_sigterm_twice_stops_the_demo_without_a_traceback(tmp_path):
    """`make` forwards a SIGTERM to the demo as well: the second, arriving while the demo
    stops its services, must not interrupt the stop with a KeyboardInterrupt traceback."""
    import signal
    import threading
    import time

    p = _demo(tmp_path, "--days", "1", "--port", str(free_port()),
              "--connect-port", str(free_port()))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")),
                              daemon=True)
    reader.start()

    def wait_for(text: str, timeout: float) -> None:
        deadline = time.time() + timeout
        while not any(text in line for line in lines):
            assert time.time() < deadline and p.poll() is None, "".join(lines)[-3000:]
            time.sleep(0.05)

    wait_for("starting airflow standalone", 600)  # the Spark Connect server is up
    p.send_signal(signal.SIGTERM)
    wait_for("stopping the demo", 60)
    p.send_signal(signal.SIGTERM)  # while its services stop
    p.wait(timeout=180)
    reader.join(timeout=10)
    out = "".join(lines)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert p.returncode == 0, out[-3000:]
