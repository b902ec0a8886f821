"""Runs part of the fault-injection suite (bench/faults.py) as the tests do: one seed per
fault, every epoch's Spark work on the test process's Spark Connect server (the
deployment's mode), and checks the rows of bench/results/faults.json's shape."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.faults import BROKEN

ROOT = Path(__file__).resolve().parent.parent


def run_matrix(kinds: set[str], server, tmp: Path,  # noqa: ANN001
               timeout: float = 1380) -> tuple[list[dict], str]:
    """The rows of ``kinds``; asserts each kept exactly-once and was really injected. A
    matrix still running after ``timeout`` seconds (below the tests' own limit, so that
    the report is ours) fails with the rows it finished and every thread's stack."""
    out = tmp / "faults.json"
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench/faults.py"), "--out", str(out),
                             "--remote", server.url, "--only", *sorted(kinds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # bench/faults.py dumps every thread's stack on it
        stdout, stderr = proc.communicate()
        pytest.fail(f"the fault matrix hung for {timeout:.0f} s; finished rows:\n{stdout}\n"
                    f"where each thread was:\n{stderr[-6000:]}")
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
