"""Runs part of the fault-injection suite (bench/faults.py) as the tests do: one seed per
fault, every epoch's Spark work on the test process's Spark Connect server (the
deployment's mode), and checks the rows of bench/results/faults.json's shape."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.faults import BROKEN

ROOT = Path(__file__).resolve().parents[2]
#: Seconds without a finished run after which a matrix counts as hung: one run takes 10-40 s
#: alone here, and several times that beside the suite's other modules on a busy day.
STALL_SECONDS = 900.0


def run_matrix(kinds: set[str], server, tmp: Path,  # noqa: ANN001
               stall: float = STALL_SECONDS) -> tuple[list[dict], str]:
    """The rows of ``kinds``; asserts each kept exactly-once and was really injected.

    A slow machine is not a failure, a hang is: bench/faults.py prints a line for each run
    it finishes, and a matrix that prints nothing for ``stall`` seconds fails with what it
    printed and every thread's stack (it dumps them on SIGABRT)."""
    out = tmp / "faults.json"
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench/faults.py"), "--out", str(out),
                             "--remote", server.url, "--only", *sorted(kinds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines: list[str] = []
    errors: list[str] = []
    last = [time.monotonic()]

    def pump_stdout() -> None:
        for line in proc.stdout:
            lines.append(line)
            last[0] = time.monotonic()

    readers = [threading.Thread(target=pump_stdout, daemon=True),
               threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)]
    for t in readers:
        t.start()
    while proc.poll() is None:
        if time.monotonic() - last[0] > stall:
            proc.send_signal(signal.SIGABRT)
            proc.wait()
            for t in readers:
                t.join(timeout=30)
            pytest.fail(f"the fault matrix finished no run for {stall:.0f} s; it printed:\n"
                        f"{''.join(lines)}\nwhere each thread was:\n{''.join(errors)[-6000:]}")
        time.sleep(1)
    for t in readers:
        t.join(timeout=30)
    stdout, stderr = "".join(lines), "".join(errors)
    table = "\n".join(line for line in stdout.splitlines() if "runs=" in line)
    assert out.exists(), (stdout[-2000:] + stderr[-3000:])
    res = json.loads(out.read_text())
    assert {row["fault"] for row in res} == kinds, table
    for row in res:
        assert set(row) >= {"fault", "runs", "outcomes", "rows_lost", "rows_duplicated"}
        assert row["runs"] == sum(row["outcomes"].values()) > 0, row
        assert (row["rows_lost"], row["rows_duplicated"]) == (0, 0), row
        assert not [o for o in row["outcomes"] if any(b in o for b in BROKEN)], row
    assert proc.returncode == 0, (table + stdout[-2000:] + stderr[-3000:])
    return res, table


def outcomes(res: list[dict], fault: str) -> str:
    """One fault's outcomes as text, for substring checks."""
    return json.dumps(next(x for x in res if x["fault"] == fault)["outcomes"])
