"""The quick subset of the fault-injection suite (bench/faults.py, one seed per fault):
every fault kind runs against real processes, a real toxiproxy and real S3, and the
published tables equal the oracle afterwards. The long soak is `make soak`, not CI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.faults import BROKEN

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
KINDS = {"sigkill_at_points", "sigkill_random_time", "coordinator_crash", "concurrent_races",
         "zombie_attempt", "storage_faults_toxiproxy", "corrupt_state", "malformed_input",
         "bad_metadata", "runner_lost"}


@pytest.mark.timeout(1800)  # about 12 minutes when it shares the machine with other modules
def test_quick_fault_matrix_keeps_exactly_once(tmp_path):
    out = tmp_path / "faults.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench/faults.py"), "--out", str(out)],
                       capture_output=True, text=True, timeout=3000, cwd=ROOT)
    table = "\n".join(line for line in r.stdout.splitlines() if "runs=" in line)
    res = json.loads(out.read_text())
    assert {row["fault"] for row in res} == KINDS, table
    for row in res:
        assert set(row) >= {"fault", "runs", "outcomes", "rows_lost", "rows_duplicated"}
        assert row["runs"] == sum(row["outcomes"].values()) > 0, row
        assert (row["rows_lost"], row["rows_duplicated"]) == (0, 0), row
        assert not [o for o in row["outcomes"] if any(b in o for b in BROKEN)], row
    assert r.returncode == 0, (table + r.stdout[-2000:] + r.stderr[-3000:])
    # The kills hit every named point, and the recoveries completed.
    points = json.dumps(next(x for x in res if x["fault"] == "sigkill_at_points")["outcomes"])
    for p in ("before_write", "mid_write", "after_snapshot", "after_ack"):
        assert f"killed:{p}->completed:ok" in points
    lost = json.dumps(next(x for x in res if x["fault"] == "runner_lost")["outcomes"])
    assert "killed->runner_lost->completed:ok" in lost, lost
