"""The quick subset of the fault-injection suite, process faults (bench/faults.py, one seed
per fault): real SIGKILL and SIGSTOP of the processes driving epochs, whose Spark work runs
on a real Spark Connect server; the published tables equal the oracle afterwards. The
kills here are at named points (each protocol step's before and after); kills at random
times, which land somewhere among those points, are `make faults` and `make soak`'s. The
data and storage faults are in test_faults_data.py."""

from __future__ import annotations

import pytest

from tests.support.faults_matrix import outcomes, run_matrix

pytestmark = pytest.mark.slow
KINDS = {"sigkill_at_points", "coordinator_crash", "zombie_attempt", "runner_lost"}


@pytest.mark.timeout(3600)  # 3-4 minutes alone; a hang fails sooner (faults_matrix)
def test_process_faults_keep_exactly_once(spark_connect, tmp_path):
    res, table = run_matrix(KINDS, spark_connect, tmp_path)
    # The kills hit every named point, and the recoveries completed.
    points = outcomes(res, "sigkill_at_points")
    for p in ("before_write", "mid_write", "after_snapshot", "after_ack"):
        assert f"killed:{p}->completed:ok" in points, table
    assert "killed->runner_lost->completed:ok" in outcomes(res, "runner_lost"), table
    zombie = outcomes(res, "zombie_attempt")
    assert "zombie_refused" in zombie and "zombie_noop" in zombie, table
