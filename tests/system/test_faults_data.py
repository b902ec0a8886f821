"""The quick subset of the fault-injection suite, faults of data and storage (bench/faults.py,
one seed per fault): concurrent begins and completes, a real toxiproxy in front of the S3
server, corrupt state files, malformed input and metadata; every epoch's Spark work runs on
a real Spark Connect server and the published tables equal the oracle afterwards."""

from __future__ import annotations

import pytest

from tests.support.faults_matrix import outcomes, run_matrix

pytestmark = pytest.mark.slow
KINDS = {"concurrent_races", "storage_faults_toxiproxy", "corrupt_state", "malformed_input",
         "bad_metadata"}


@pytest.mark.timeout(3600)  # 3-4 minutes alone; a hang fails sooner (faults_matrix)
def test_data_and_storage_faults_keep_exactly_once(spark_connect, tmp_path):
    res, table = run_matrix(KINDS, spark_connect, tmp_path)
    # Each corruption made the next begin skip epoch 2 (and replay) instead of failing.
    corrupt = next(x for x in res if x["fault"] == "corrupt_state")["outcomes"]
    assert sorted(o.split(":")[0] for o in corrupt) == ["delete", "flip", "truncate"], table
    assert all(":skipped=[2" in o for o in corrupt), table
    assert "gx:declined:nothing_published=True" in outcomes(res, "malformed_input"), table
    assert outcomes(res, "bad_metadata").count("refused=True") == 9, table
