"""Runs part of the fault-injection suite (bench/faults.py) as the tests do: one seed per
fault, every epoch's Spark work on the test process's Spark Connect server (the
deployment's mode), and checks the rows of bench/results/faults.json's shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.faults import BROKEN

ROOT = Path(__file__).resolve().parent.parent


def run_matrix(kinds: set[str], server, tmp: Path) -> tuple[list[dict], str]:  # noqa: ANN001
    """The rows of ``kinds``; asserts each kept exactly-once and was really injected."""
    out = tmp / "faults.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench/faults.py"), "--out", str(out),
                        "--remote", server.url, "--only", *sorted(kinds)],
                       capture_output=True, text=True, timeout=3000, cwd=ROOT)
    table = "\n".join(line for line in r.stdout.splitlines() if "runs=" in line)
    assert out.exists(), (r.stdout[-2000:] + r.stderr[-3000:])
    res = json.loads(out.read_text())
    assert {row["fault"] for row in res} == kinds, table
    for row in res:
        assert set(row) >= {"fault", "runs", "outcomes", "rows_lost", "rows_duplicated"}
        assert row["runs"] == sum(row["outcomes"].values()) > 0, row
        assert (row["rows_lost"], row["rows_duplicated"]) == (0, 0), row
        assert not [o for o in row["outcomes"] if any(b in o for b in BROKEN)], row
    assert r.returncode == 0, (table + r.stdout[-2000:] + r.stderr[-3000:])
    return res, table


def outcomes(res: list[dict], fault: str) -> str:
    """One fault's outcomes as text, for substring checks."""
    return json.dumps(next(x for x in res if x["fault"] == fault)["outcomes"])
