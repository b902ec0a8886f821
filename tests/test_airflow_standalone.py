"""flights_daily under a real `airflow standalone`: the plugin's REST API behind Airflow's
auth, triggered runs, a retry that restores, a backfill from an epoch, and the Epochs page
in headless Chromium. Assertions are on checkpoint storage and the published outputs.

The tests of this module share one Airflow and run in file order (each builds on the
epochs of the one before)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from datetime import date
from pathlib import Path

import pytest

from checkpointing import Coordinator, LocalStorage, read_manifest
from checkpointing.lineages import read_origin
from spark_jobs.landing import land
from tests import oracle
from tests.airflow_env import ROOT
from tests.airflow_standalone import Standalone

pytestmark = pytest.mark.slow
DAG = "flights_daily"
API = f"/ckpt/api/dags/{DAG}"


@pytest.fixture(scope="module")
def af(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("standalone")
    land(LocalStorage(tmp / "data"), [date(2013, 1, 1), date(2013, 1, 2)],
         malformed_rate=0.01, seed=7)
    sa = Standalone(tmp / "airflow", CKPT_STORAGE=f"file://{tmp}/ckpt",
                    CKPT_DATA=f"file://{tmp}/data", FLIGHTS_RETRIES="1",
                    FLIGHTS_RETRY_DELAY_SECONDS="1")
    try:
        sa.start()
        yield sa, tmp
    finally:
        sa.stop()


def coord(tmp: Path) -> Coordinator:
    return Coordinator(LocalStorage(tmp / "ckpt"), DAG)


def test_rest_api_requires_airflow_auth(af):
    sa, _ = af
    assert sa.get(f"{API}/epochs", user=None).status_code == 401
    assert sa.get(f"/ckpt/ui/{DAG}", user=None).status_code == 401
    r = sa.get(f"{API}/epochs", user="admin")
    assert r.status_code == 200 and r.json()["epochs"] == []
    assert sa.get(f"{API}/epochs", user="viewer").status_code == 200
    # A viewer may read but not act on the DAG.
    assert sa.post(f"{API}/savepoints", {"name": "sp1"}, user="viewer").status_code == 403
    assert sa.post(f"{API}/backfills", {"from_epoch": 1, "start": "2013-01-02",
                                        "end": "2013-01-03"}, user="viewer").status_code == 403
    bad = sa.get(f"{API}/epochs", user=None, headers={"Authorization": "Bearer not-a-jwt"})
    assert bad.status_code in (401, 403)
    # Ids never climb out of their prefix.
    assert sa.get("/ckpt/api/dags/..%2F..%2Fetc/epochs").status_code in (404, 422)
    assert sa.get("/ckpt/api/dags/a..b/epochs").status_code == 400
    spec = sa.get("/ckpt/openapi.json").json()
    assert "/api/dags/{dag_id}/backfills" in spec["paths"]


def test_triggered_runs_and_a_retry_that_restores(af):
    sa, tmp = af
    first = sa.trigger(DAG, "2013-01-02T00:00:00Z")
    assert sa.wait_run(DAG, first) == "success", sa.tail()
    c = coord(tmp)
    assert c.latest_completed() == 1 and read_manifest(c.storage, c.layout).epoch_id == 1

    # route_stats' first try dies after its snapshot, before acknowledging; the retry
    # restores from epoch 1 and this epoch's acknowledged upstream handles.
    second = sa.trigger(DAG, "2013-01-03T00:00:00Z",
                        {"checkpoint": {"fault_inject": "route_stats:1"}})
    assert sa.wait_run(DAG, second) == "success", sa.tail()
    tries = sa.task_tries(DAG, second)
    assert tries["route_stats"] == ("success", 2)
    assert tries["enrich"] == ("success", 1)
    handles = c.completed_handles(2)
    assert handles["route_stats"].attempt == 2
    assert handles["route_stats"].restored_from == {"epoch_id": 1}
    assert c.barrier(2).parent_epoch_id == 1
    data = LocalStorage(tmp / "data")
    oracle.assert_gold_matches_oracle(c, data, ["origin", "dest"], "gold_route_stats",
                                      until="2013-01-03")
    oracle.assert_gold_matches_oracle(c, data, ["carrier"], "gold_carrier_stats",
                                      until="2013-01-03")
    # Through the REST API: the same epochs and per-task statistics.
    listed = sa.get(f"{API}/epochs").json()
    assert [e["epoch_id"] for e in listed["epochs"]] == [2, 1]
    assert listed["epochs"][0]["tasks_acked"] == listed["epochs"][0]["tasks_total"] == 6
    detail = sa.get(f"{API}/epochs/2").json()
    by_task = {t["task_id"]: t for t in detail["tasks"]}
    assert by_task["route_stats"]["acked_attempt"] == 2
    assert sa.get(f"{API}/epochs/99").status_code == 404


def test_backfill_from_an_epoch(af):
    sa, tmp = af
    c = coord(tmp)
    land(LocalStorage(tmp / "data"), [date(2013, 1, 3), date(2013, 1, 4)], dims=False,
         seed=8)
    r = sa.post(f"{API}/backfills", {"from_epoch": 1, "start": "2013-01-03",
                                     "end": "2013-01-05"})
    assert r.status_code == 201, r.text
    bf = r.json()
    lineage = bf["lineage"]
    assert read_origin(c.storage, c.layout, lineage).from_epoch == 1
    # Bad requests are refused with the reason, and record nothing.
    assert sa.post(f"{API}/backfills", {"from_epoch": 77, "start": "2013-01-03",
                                        "end": "2013-01-05"}).status_code == 400
    assert sa.post(f"{API}/backfills", {"from_epoch": 1, "start": "2013-01-05",
                                        "end": "2013-01-03"}).status_code == 400

    deadline = time.time() + 900
    while time.time() < deadline:
        b = sa.get(f"/api/v2/backfills/{bf['backfill_id']}").json()
        if b.get("completed_at"):
            break
        time.sleep(5)
    assert b.get("completed_at"), sa.tail()
    runs = sa.get(f"/api/v2/dags/{DAG}/dagRuns",
                  params={"run_type": "backfill"}).json()["dag_runs"]
    assert sorted(r["state"] for r in runs) == ["success"] * 3, runs

    epochs = [e for e in (c.barrier(i) for i in c.epoch_ids()) if e.lineage == lineage]
    assert [e.parent_epoch_id for e in epochs] == [1, epochs[0].epoch_id,
                                                   epochs[1].epoch_id]
    assert [e.publish_on_complete for e in epochs] == [False, False, True]
    m = read_manifest(c.storage, c.layout)
    assert (m.epoch_id, m.lineage) == (epochs[-1].epoch_id, lineage)
    # Published outputs switched over once, at the backfill's last epoch.
    assert [h["epoch_id"] for h in m.history if h["lineage"] == lineage] == [m.epoch_id]
    # The chain from epoch 1 replayed 2013-01-02..04: equal to a clean computation.
    data = LocalStorage(tmp / "data")
    oracle.assert_gold_matches_oracle(c, data, ["origin", "dest"], "gold_route_stats",
                                      until="2013-01-05")
    assert c.latest_completed() == 2  # main is untouched


def test_epochs_page_in_headless_chromium(af, tmp_path):
    sa, tmp = af
    ui = ROOT / "tests" / "ui"
    assert shutil.which("node") and Path("/usr/bin/chromium").exists() and \
        (ui / "node_modules" / "playwright-core").exists(), \
        "the browser test needs node, Debian's chromium and tests/ui's packages: " \
        "run scripts/install_browser.sh (make test does)"
    shot = tmp_path / "epochs.png"
    expected = sa.get(f"{API}/epochs").json()["epochs"]
    r = subprocess.run(
        ["node", "epochs.spec.mjs"], cwd=ui, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "AIRFLOW_URL": sa.url, "DAG_ID": DAG,
             "USERNAME": "admin", "PASSWORD": "admin-pw", "SCREENSHOT": str(shot),
             "EPOCH_ID": str(expected[-1]["epoch_id"])})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["rows"] == len(expected)
    assert seen["task_rows"] == 6 and seen["chart_points"] >= len(expected) - 1
    assert seen["savepoint_message"].startswith("savepoint sp-")
    run_id = seen["trigger_message"].removeprefix("triggered run ")
    assert sa.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}").status_code == 200
    assert shot.exists() and shot.stat().st_size > 10_000
    names = [s["name"] for s in sa.get(f"{API}/savepoints").json()["savepoints"]]
    assert any(n.startswith("sp-") for n in names)
