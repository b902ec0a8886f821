"""flights_daily under a real `airflow standalone` (LocalExecutor) on PostgreSQL, the
metadata database users deploy, its tasks clients of a Spark Connect server: the plugin's
REST API behind Airflow's auth, triggered runs, a retry that restores, a backfill from an
epoch, and the Epochs page in headless Chromium. Assertions are on checkpoint storage and
the published outputs. (SQLite's backfills: tests/system/test_airflow_cli.py.)

The tests of this module share one Airflow and run in file order (each builds on the
epochs of the one before)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest

from bench.harness import oracle
from bench.harness.airflow_env import ROOT
from bench.harness.airflow_standalone import Standalone, connect_env
from bench.harness.pg import airflow_database
from bench.harness.sinks import WebhookSink
from bench.harness.statsd_sink import StatsdSink
from checkpointing import Coordinator, LocalStorage, read_manifest
from checkpointing.protocol.documents import parse_iso
from checkpointing.records.backfill_lineages import read_origin, read_promotion
from plugins.dag_checkpoints.server.backfill import frontier
from spark_jobs.flights.landing import land

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # shares 2 cores with the fault matrix
DAG = "flights_daily"
API = f"/ckpt/api/dags/{DAG}"


@pytest.fixture(scope="module")
def af(tmp_path_factory, spark_connect):
    tmp = tmp_path_factory.mktemp("standalone")
    land(LocalStorage(tmp / "data"), [date(2013, 1, 1), date(2013, 1, 2)],
         malformed_rate=0.01, seed=7)
    # A DAG folder of its own: the backfill test deploys a fixed job by editing a DAG file.
    shutil.copytree(ROOT / "dags", tmp / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    statsd = StatsdSink()  # Airflow's own StatsD metrics, with InfluxDB-style tags
    lineage = WebhookSink()  # an OpenLineage receiver, through the provider's HTTP transport
    transport = json.dumps({"type": "http", "url": lineage.url, "endpoint": "api/v1/lineage"})
    # PostgreSQL: Airflow supports backfills on SQLite only without concurrent writers (a
    # backfill created while the scheduler writes may be answered 503 and half made).
    db_env = airflow_database("ckpt_airflow_standalone")
    sa = Standalone(tmp / "airflow", CKPT_STORAGE=f"file://{tmp}/ckpt",
                    CKPT_DATA=f"file://{tmp}/data", FLIGHTS_RETRIES="1",
                    FLIGHTS_RETRY_DELAY_SECONDS="1", AIRFLOW__CORE__DAGS_FOLDER=str(tmp / "dags"),
                    AIRFLOW__METRICS__STATSD_ON="True", AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
                    AIRFLOW__METRICS__STATSD_PORT=str(statsd.port),
                    AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED="True",
                    AIRFLOW__OPENLINEAGE__TRANSPORT=transport,
                    AIRFLOW__OPENLINEAGE__NAMESPACE="ckpt-standalone",
                    **db_env, **connect_env(spark_connect))
    sa.statsd, sa.lineage = statsd, lineage
    try:
        sa.start()
        yield sa, tmp
    finally:
        sa.stop()
        statsd.stop()
        lineage.stop()


def coord(tmp: Path) -> Coordinator:
    return Coordinator(LocalStorage(tmp / "ckpt"), DAG)


def _wait_until_no_run_is_active(sa: Standalone) -> None:
    """Until no run of the DAG is queued or running (an earlier test's may still be)."""
    deadline = time.time() + 300
    while sa.get(f"/api/v2/dags/{DAG}/dagRuns",
                 params={"state": ["queued", "running"]}).json()["total_entries"]:
        assert time.time() < deadline, sa.tail()
        time.sleep(2)


def test_rest_api_requires_airflow_auth(af):
    sa, _ = af
    assert sa.get(f"{API}/epochs", user=None).status_code == 401
    assert sa.get(f"/ckpt/ui/{DAG}", user=None).status_code == 401
    r = sa.get(f"{API}/epochs", user="admin")
    assert r.status_code == 200 and r.json()["epochs"] == []
    assert sa.get(f"{API}/epochs", user="viewer").status_code == 200
    # A viewer may read but not act on the DAG.
    assert sa.post(f"{API}/savepoints", {"name": "sp1"}, user="viewer").status_code == 403
    assert sa.post(f"{API}/backfills", {"from_epoch": 1, "first_day": "2013-01-02",
                                        "last_day": "2013-01-03", "dry_run": True},
                   user="viewer").status_code == 403
    bad = sa.get(f"{API}/epochs", user=None, headers={"Authorization": "Bearer not-a-jwt"})
    assert bad.status_code in (401, 403)
    # Ids never climb out of their prefix.
    assert sa.get("/ckpt/api/dags/..%2F..%2Fetc/epochs").status_code in (404, 422)
    assert sa.get("/ckpt/api/dags/a..b/epochs").status_code in (400, 404)
    spec = sa.get("/ckpt/openapi.json").json()
    assert "/api/dags/{dag_id}/backfills" in spec["paths"]


def test_api_hygiene(af):
    """Unknown DAGs are 404 as in Airflow's API; a 422 never echoes the body back; the
    Swagger/ReDoc pages (CDN assets, no sign-in) are off; booleans are not epoch ids."""
    sa, _ = af
    assert sa.get("/ckpt/api/dags/no_such_dag/epochs").status_code == 404
    big = "x" * 10_000_000
    r = sa.post(f"{API}/savepoints", {"name": big})
    assert r.status_code == 422 and len(r.content) < 5_000, len(r.content)
    assert big[:1000] not in r.text
    assert sa.post(f"{API}/backfills", {"from_epoch": True, "first_day": "2013-01-02",
                                        "last_day": "2013-01-03"}).status_code == 422
    # The plugin is registered once (folder and entry point): no import-error badge.
    errors = sa.get("/api/v2/plugins/importErrors").json()
    assert errors["total_entries"] == 0, errors
    for path in ("/ckpt/docs", "/ckpt/redoc"):
        assert sa.get(path, user=None).status_code == 404
        assert sa.get(path).status_code == 404


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
    # Airflow's failed try 1 of route_stats, with its times after the barrier; no other
    # task failed a try.
    (killed,) = by_task["route_stats"]["failed_tries"]
    assert killed["attempt"] == 1 and killed["state"] in ("failed", "up_for_retry"), killed
    assert 0 < killed["ended_delay_ms"] and killed["started_delay_ms"] < killed["ended_delay_ms"]
    assert killed["ended_delay_ms"] <= by_task["route_stats"]["ack_delay_ms"], by_task
    assert all(t["failed_tries"] == [] for n, t in by_task.items() if n != "route_stats"), \
        by_task
    assert sa.get(f"{API}/epochs/99").status_code == 404

    # Clearing one root job of a completed run (Airflow's "clear task"): a 500 before the
    # work-around for apache/airflow#70368. The root joins the run's epoch, which it had
    # acknowledged, so it is not run again and no second epoch begins.
    r = sa.write("POST", f"/api/v2/dags/{DAG}/clearTaskInstances",
                 {"dry_run": False, "dag_run_id": second, "task_ids": ["ingest_flights"],
                  "only_failed": False})
    assert r.status_code == 200, r.text
    assert sa.wait_run(DAG, second) == "success", sa.tail()
    assert sa.task_tries(DAG, second)["ingest_flights"] == ("success", 2)
    assert [b.epoch_id for b in c.barriers()] == [1, 2]
    assert c.completed_handles(2)["ingest_flights"].attempt == 1


def lowercase_some_carriers(data: LocalStorage, day: date) -> None:
    """The data quirk behind the bug: from data day 3 every third flight's carrier code
    arrives in lower case."""
    import io

    import pandas as pd

    key = f"raw/flights/{day.isoformat()}.csv"
    raw = pd.read_csv(io.BytesIO(data.read(key)[0]), dtype=str, keep_default_na=False)
    raw.loc[raw.index % 3 == 0, "carrier"] = raw["carrier"].str.lower()
    data.write(key, raw.to_csv(index=False).encode())


def upper_carriers(rows):  # the fixed job's rule, for the oracle
    return rows.assign(carrier=rows["carrier"].str.upper())


def wait_for_dag_source(sa: Standalone, text: str, timeout: float = 180) -> None:
    """Until Airflow has parsed the edited DAG file (its latest version holds ``text``)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = sa.get(f"/api/v2/dagSources/{DAG}")
        if r.status_code == 200 and text in r.json().get("content", ""):
            return
        time.sleep(2)
    raise AssertionError(f"the edited DAG was not parsed within {timeout}s\n{sa.tail()}")


def test_backfill_of_a_fixed_job_from_a_savepoint(af):
    """The reason to backfill from a checkpoint: a job has a bug from data day 3 on. Main
    runs days 1-3 (the bug publishes wrong carrier statistics); the user fixes the job in
    the DAG file and backfills days 3-4 from the savepoint taken after day 2; the backfill
    is promoted at its end, the next scheduled run (day 5) continues from it, and the
    published tables equal an independent computation of the fixed job over days 1-5."""
    sa, tmp = af
    c = coord(tmp)
    data = LocalStorage(tmp / "data")
    sp = sa.post(f"{API}/savepoints", {"name": "after-day2", "epoch_id": 2})
    assert sp.status_code == 201, sp.text
    land(data, [date(2013, 1, 3)], dims=False, seed=8)
    lowercase_some_carriers(data, date(2013, 1, 3))
    run3 = sa.trigger(DAG, "2013-01-04T00:00:00Z")
    assert sa.wait_run(DAG, run3) == "success", sa.tail()
    assert c.latest_completed() == 3
    buggy = oracle.published(c, "gold_carrier_stats")
    assert buggy["carrier"].str.islower().any()  # lower-case codes counted on their own
    # The fix, deployed as users deploy: the DAG file now names the fixed job.
    dag_file = tmp / "dags" / "flights_daily.py"
    dag_file.write_text(dag_file.read_text().replace(
        'job=f"{JOBS}.stats:carrier_stats"', 'job="tests.support.changed_jobs:carrier_stats"'))
    wait_for_dag_source(sa, "tests.support.changed_jobs:carrier_stats")

    days = {"first_day": "2013-01-03", "last_day": "2013-01-04"}  # data days
    want_runs = [{"logical_date": "2013-01-04", "data_day": "2013-01-03"},
                 {"logical_date": "2013-01-05", "data_day": "2013-01-04"}]
    origin = {"from_savepoint": "after-day2"}
    # Day 4 has not landed: the preview names it, and nothing can start.
    missing = sa.post(f"{API}/backfills", {**origin, **days, "dry_run": True}).json()
    assert missing["conflicts"] == ["input missing for raw/flights/2013-01-04.csv: land it "
                                    "first, or shorten the range"], missing
    assert missing["plan_change"] == {"added": [], "removed": [], "changed": []}
    land(data, [date(2013, 1, 4)], dims=False, seed=8)
    lowercase_some_carriers(data, date(2013, 1, 4))
    p = sa.post(f"{API}/backfills", {**origin, **days, "dry_run": True})
    assert p.status_code == 200, p.text
    preview = p.json()
    assert preview["runs"] == want_runs and preview["conflicts"] == [], preview
    assert preview["origin"] == {"from_savepoint": "after-day2", "epoch_id": 2,
                                 "lineage": "main", "frontier": "2013-01-02"}
    assert preview["published_now"]["frontier"] == "2013-01-03"
    # It names the table versions its publishing commit would replace (epoch 3's).
    from checkpointing.records.two_phase_publish import published_tables
    assert preview["published_now"]["tables"] == published_tables(
        read_manifest(c.storage, c.layout), 3) != {}
    assert preview["published_after"] == {"frontier": "2013-01-04",
                                          "lineage": "(the backfill's)", "promotes": True}
    assert sa.get(f"/api/v2/dags/{DAG}/dagRuns",
                  params={"run_type": "backfill"}).json()["dag_runs"] == []
    # Bad requests are refused with the reason, and record nothing.
    assert sa.post(f"{API}/backfills", {"from_epoch": 77, "first_day": "2013-01-03",
                                        "last_day": "2013-01-05"}).status_code == 400
    assert sa.post(f"{API}/backfills", {**origin, "first_day": "2013-01-05",
                                        "last_day": "2013-01-03"}).status_code == 400
    held = sa.post(f"{API}/backfills", {**origin, "first_day": "2013-01-02",
                                        "last_day": "2013-01-04"})
    assert held.status_code == 409 and "already in the origin's state" in held.text
    r = sa.post(f"{API}/backfills", {**origin, **days})
    assert r.status_code == 201, r.text
    bf = r.json()
    lineage = bf["lineage"]
    assert bf["runs"] == want_runs and (bf["first_day"], bf["last_day"]) == tuple(days.values())
    assert read_origin(c.storage, c.layout, lineage).from_savepoint == "after-day2"
    # The next scheduled run arrives while the backfill runs: it waits for it (its begin
    # step is rescheduled, no retry spent), then continues from the backfill's last epoch.
    land(data, [date(2013, 1, 5)], dims=False, seed=8)
    lowercase_some_carriers(data, date(2013, 1, 5))
    run = sa.trigger(DAG, "2013-01-06T00:00:00Z")

    deadline = time.time() + 900
    while time.time() < deadline:
        b = sa.get(f"/api/v2/backfills/{bf['backfill_id']}").json()
        if b.get("completed_at"):
            break
        time.sleep(5)
    assert b.get("completed_at"), sa.tail()
    runs = sa.get(f"/api/v2/dags/{DAG}/dagRuns",
                  params={"run_type": "backfill"}).json()["dag_runs"]
    assert sorted(r["state"] for r in runs) == ["success"] * 2, runs
    # The runs are rows of the PostgreSQL database, not of some SQLite file.
    import psycopg2

    dsn = sa.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("postgresql+psycopg2", "postgresql")
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from dag_run where dag_id = %s and backfill_id = %s",
                    (DAG, bf["backfill_id"]))
        assert cur.fetchone() == (2,)
    assert not (sa.home / "airflow.db").exists()
    assert sa.wait_run(DAG, run) == "success", sa.tail()
    epochs = c.barriers(lineage)
    # Each epoch consumed the data day the preview said it would.
    assert [frontier(e) for e in epochs] == [r["data_day"] for r in preview["runs"]]
    assert [(e.parent_epoch_id, e.parent_savepoint) for e in epochs] == [
        (None, "after-day2"), (epochs[0].epoch_id, None)]
    assert [e.publish_on_complete for e in epochs] == [False, True]
    # Published outputs switched over once, at the backfill's last epoch (then the waiting
    # main run published its own epoch after it).
    m = read_manifest(c.storage, c.layout)
    assert [(h["epoch_id"], h["lineage"]) for h in m.history][-2:] == [
        (epochs[-1].epoch_id, lineage), (m.epoch_id, "main")], m.history
    # It went past what main had published: promoted, main continued from its last epoch;
    # main's own epoch 3 stays there, superseded.
    promotion = read_promotion(c.storage, c.layout, lineage)
    assert (promotion.promoted, promotion.superseded) == (True, 3)
    # Each Delta table got one version per published epoch, the backfill's promotion one
    # commit, its unpublished first epoch none.
    from checkpointing.tables.delta import open_table
    for out in ("gold_carrier_stats", "gold_route_stats", "gold_flights_enriched"):
        committed = [int(h["ckpt.epoch_id"]) for h in open_table(
            m.outputs[out].meta["table"]["location"]).history() if h.get("ckpt.epoch_id")]
        assert sorted(committed) == [h["epoch_id"] for h in m.history], (out, committed)
        assert epochs[0].epoch_id not in committed
    assert c.metadata(3).completed
    nxt = c.latest_completed()
    assert nxt == m.epoch_id > epochs[-1].epoch_id
    assert c.barrier(nxt).lineage == "main" and c.barrier(nxt).parent_epoch_id == \
        epochs[-1].epoch_id and c.barrier(nxt).run_id == run
    begin_log = sa.get(f"/api/v2/dags/{DAG}/dagRuns/{run}/taskInstances/checkpoint_begin/"
                       "logs/1").text
    assert "will continue the main line when it completes; main runs wait for it" in \
        begin_log, begin_log[-3000:]
    assert sa.task_tries(DAG, run)["checkpoint_begin"] == ("success", 1)
    oracle.assert_gold_matches_oracle(c, data, ["carrier"], "gold_carrier_stats",
                                      until="2013-01-06", prepare=upper_carriers)
    oracle.assert_gold_matches_oracle(c, data, ["origin", "dest"], "gold_route_stats",
                                      until="2013-01-06")
    # Published data now runs through 2013-01-05: ending a backfill before that is a
    # rewind, refused unless asked for.
    back = {**origin, "first_day": "2013-01-03", "last_day": "2013-01-03"}
    refused = sa.post(f"{API}/backfills", back)
    assert refused.status_code == 409 and "behind what is published" in refused.text
    asked = sa.post(f"{API}/backfills", {**back, "rewind": True, "dry_run": True}).json()
    assert asked["rewinds"] is True and asked["conflicts"] == []


def _size(n: int) -> str:
    """Bytes as the page shows them ("24.4 KiB")."""
    units, v, i = ["B", "KiB", "MiB", "GiB"], float(n), 0
    while v >= 1024 and i < 3:
        v, i = v / 1024, i + 1
    return f"{v:.{1 if i else 0}f} {units[i]}"


def test_epochs_page_in_headless_chromium(af, tmp_path):
    sa, tmp = af
    ui = ROOT / "tests" / "ui"
    assert shutil.which("node") and Path("/usr/bin/chromium").exists() and \
        (ui / "node_modules" / "playwright-core").exists(), \
        "the browser test needs node, Debian's chromium and tests/ui's packages: " \
        "run scripts/install_browser.sh (make test does)"
    shot = Path(os.environ.get("CKPT_UI_SHOTS", tmp_path)) / "epochs.png"
    expected = sa.get(f"{API}/epochs").json()["epochs"]
    # The page is checked against the epochs, savepoint and backfill the module's earlier
    # tests made (a deployment of its own would cost a minute and a run of each).
    assert expected, "no epochs to show: this test reads what the module's earlier tests " \
        "ran; run the whole module (pytest tests/system/test_airflow_standalone.py)"
    # The epoch whose route_stats was killed once (the module's first test): its failed
    # try, as Airflow recorded it, on the page's task timeline.
    retried = 2
    tries = {t["task_id"]: t["failed_tries"]
             for t in sa.get(f"{API}/epochs/{retried}").json()["tasks"]}
    assert tries["route_stats"], tries
    r = subprocess.run(
        ["node", "epochs.spec.mjs"], cwd=ui, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "AIRFLOW_URL": sa.url, "DAG_ID": DAG,
             "USERNAME": "admin", "PASSWORD": "admin-pw", "SCREENSHOT": str(shot),
             "SCREENSHOT_DARK": str(shot.with_name("epochs-dark.png")),
             "EPOCH_ID": str(expected[-1]["epoch_id"]), "PREVIEW_FROM": "after-day2",
             "PREVIEW_FIRST": "2013-01-03", "PREVIEW_LAST": "2013-01-05",
             "REWIND_LAST": "2013-01-03", "RETRIED_EPOCH_ID": str(retried)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["rows"] == len(expected)
    # The header: completed and failed epochs, counted as the REST listing counts them
    # (every epoch, not just this page's), and the last completed epoch's age.
    listing = sa.get(f"{API}/epochs").json()
    counts = listing["counts"]
    assert sum(counts.values()) == listing["total"], listing
    assert seen["header"]["completed"] == str(counts.get("completed", 0)) != "0", seen
    assert seen["header"]["failed"] == str(counts.get("aborted", 0)), seen
    assert seen["header"]["age"].endswith(" ago"), seen["header"]
    # Each row names the table versions its epoch published ("gold_route_stats v3"), as
    # the REST listing and the manifest's history say; the completed epochs published some.
    for e in expected:
        want = ", ".join(f"{t} v{v}" for t, v in sorted(e["tables"].items()))
        assert seen["tables"][str(e["epoch_id"])] == want, (e, seen["tables"])
    assert any("gold_route_stats v" in t for t in seen["tables"].values()), seen["tables"]
    # The Run column tells runs apart at 1280 px: the kind of run as an icon and its
    # logical date, shown whole (not cut); the whole run id on hover. No stale header: this
    # pipeline has no maximum age.
    for e in expected:
        run = seen["runs"][str(e["epoch_id"])]
        assert run["title"].endswith(f"run {e['run_id']}") and not run["cut"], (e, run)
        if e["logical_date"]:
            assert run["text"].endswith(e["logical_date"][:10]), (e, run)
        assert "__" not in run["text"], run
    # runs of different data days never share a label
    dates = {e["logical_date"][:10] for e in expected if e["logical_date"]}
    assert len({seen["runs"][str(e["epoch_id"])]["text"] for e in expected
                if e["logical_date"]}) >= len(dates), seen["runs"]
    assert seen["stale"] is None, seen["stale"]
    # Each row's highest attempt of any task, as the REST listing says; every epoch that
    # ran its tasks shows one (the listing's per-task figures are the detail route's).
    for e in expected:
        top = e["max_attempt"]
        assert seen["attempts"][str(e["epoch_id"])] == (str(top) if top else "–"), \
            (e["epoch_id"], seen["attempts"])
    assert all(e["max_attempt"] for e in expected if e["status"] == "completed"), expected
    assert seen["message_height"] in (0, -1), seen["message_height"]  # no empty band
    assert seen["task_rows"] == 6 and seen["chart_points"] == len(expected)
    # The page's rows: each task says which epoch it restored from (the
    # oldest listed epoch restored from nothing, or from its parent); no row wraps; no
    # tick collides with the unit, none says "0.0", no failed epoch without a value is a
    # full-height bar; the disabled Start button looks disabled; a cancelled epoch names
    # the task(s) that had not acknowledged.
    oldest = sa.get(f"{API}/epochs/{expected[-1]['epoch_id']}").json()
    want_from = "empty state" if oldest["parent_epoch_id"] is None \
        else f"epoch {oldest['parent_epoch_id']}"
    assert set(seen["restored_from"]) == {want_from}, seen["restored_from"]
    # Flink's per-subtask snapshot split and the epoch's incremental vs full size, as the
    # REST detail says.
    for t in oldest["tasks"]:
        want = "–" if t["sync_ms"] is None else f"{t['sync_ms'] / 1000:.1f} s / "
        assert seen["snapshots"][t["task_id"]].startswith(want), (t, seen["snapshots"])
    # Flink's incremental against full size counts state only; staged outputs apart.
    staged = sum(t["metrics"].get("outputs_staged_bytes", 0) for t in oldest["tasks"])
    assert 0 < staged < oldest["bytes_written"], oldest
    assert seen["sizes"].startswith("state uploaded ") and " of " in seen["sizes"] and \
        seen["sizes"].endswith(f"outputs staged {_size(staged)}"), (seen["sizes"], staged)
    assert max(seen["row_heights"]) < 1.6 * min(seen["row_heights"]), seen["row_heights"]
    # The selected row and the detail agree (one read): status and acknowledged tasks.
    sel = seen["selected"]
    assert [r["id"] for r in sel["rows"]] == [str(expected[-1]["epoch_id"])], sel
    assert sel["rows"][0]["status"] == sel["detail_status"] == oldest["status"], sel
    assert sel["rows"][0]["acked"] == f"{sel['detail_acked']}/{sel['task_rows']}", sel
    for ch in seen["charts"]:
        assert ch["overlaps"] == 0 and ch["fullFailed"] == 0, ch
        assert "0.0" not in ch["ticks"], ch
    assert float(seen["disabled_opacity"]) < 0.6, seen["disabled_opacity"]
    cancelled = [e for e in expected if e["status"] == "aborted" and e["missing_tasks"]]
    assert all(any(t in seen["failed_task"][i] for t in e["missing_tasks"])
               for i, e in enumerate(expected) if e in cancelled), seen["failed_task"]
    assert seen["timeline_bars"] == 6  # the oldest epoch completed: every task acked
    assert seen["failed_tries"] == [[t, str(x["attempt"])] for t, xs in tries.items()
                                    for x in xs], (seen["failed_tries"], tries)
    assert seen["failed_tries"], tries
    # Nothing scrolls sideways at 1280 px: neither the page, its tables, nor Airflow's.
    assert seen["overflow"] == {"page": 0, "epochs": 0, "tasks": 0, "airflow": 0}, seen
    assert seen["savepoint_message"].startswith("savepoint sp-")
    # The lineage timeline: main and the backfill, its branch from the savepoint's epoch
    # and its promotion back to main; a dot per listed epoch.
    lineages = sa.get(f"{API}/lineages").json()["lineages"]
    assert seen["lineages"] == {"rows": str(1 + len(lineages)), "branches": str(len(lineages)),
                                "promotions": "1", "dots": str(len(expected))}, seen
    # The form's preview lists the runs and must be conflict-free before Start is enabled;
    # a rewind is a conflict and Start stays disabled.
    assert "run 2013-01-06 reads data day 2013-01-05" in seen["preview"], seen["preview"]
    assert "conflict:" not in seen["preview"]
    assert "tables replaced by one commit each when it publishes: gold_carrier_stats v" in \
        seen["preview"], seen["preview"]
    assert seen["start"] == {"before_preview": False, "after_preview": True,
                             "after_edit": False, "after_rewind_preview": False}, seen
    assert "behind what is published" in seen["rewind_preview"]
    run_id = seen["trigger_message"].removeprefix("triggered run ")
    run = sa.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}")
    assert run.status_code == 200
    # The run has the logical date a scheduled run would have: the next data day.
    newest = max(e["logical_date"][:10] for e in expected if e["logical_date"])
    next_day = (date.fromisoformat(newest) + timedelta(days=1)).isoformat()
    assert seen["trigger_date"] == next_day
    assert run.json()["logical_date"][:10] == next_day
    assert run.json()["conf"] == {"checkpoint": {"enabled": True}}  # the page's run conf
    assert seen["theme"] == "dark" and seen["background"] != "rgb(255, 255, 255)", seen
    assert shot.exists() and shot.stat().st_size > 10_000
    names = [s["name"] for s in sa.get(f"{API}/savepoints").json()["savepoints"]]
    assert any(n.startswith("sp-") for n in names)


def test_abort_route_and_downstream_asset_dag(af):
    """Abort a pending epoch over REST (a viewer may not); every publication of
    gold_route_stats is one asset event, which ran the downstream route_report DAG, and that
    DAG read the Delta table at the version the event named."""
    sa, tmp = af
    c = coord(tmp)
    from checkpointing import plan_from_edges

    # On a lineage of its own: the page test's run may hold main's slot right now.
    stuck = c.begin_epoch(plan_from_edges({"t": []}), "by-hand", lineage="drill").epoch_id
    path = f"{API}/epochs/{stuck}/abort"
    assert sa.post(path, {"reason": "runner gone"}, user="viewer").status_code == 403
    r = sa.post(path, {"reason": "runner gone"})
    assert r.status_code == 200 and r.json()["reason"] == "cancelled", r.text
    assert sa.post(path, {"reason": "again"}).status_code == 409
    assert Coordinator(LocalStorage(tmp / "ckpt"), DAG).metadata(stuck).reason == "cancelled"

    published = len(read_manifest(c.storage, c.layout).history)
    events = sa.get("/api/v2/assets/events", params={"source_dag_id": DAG,
                                                     "limit": 100}).json()["asset_events"]
    route_events = [e for e in events if e["uri"].endswith("/flights_daily/gold_route_stats")]
    assert all(str(tmp) not in e["uri"] for e in events)  # no storage path in an asset
    assert len(route_events) == published > 0, (published, route_events)
    assert all(e["extra"]["epoch_id"] >= 1 for e in route_events)
    deadline = time.time() + 180
    runs = []
    while time.time() < deadline:
        runs = sa.get("/api/v2/dags/route_report/dagRuns").json()["dag_runs"]
        if any(r["state"] == "success" for r in runs):
            break
        time.sleep(3)
    ok = [r for r in runs if r["state"] == "success"]
    assert ok, runs
    xcom = sa.get(f"/api/v2/dags/route_report/dagRuns/{ok[0]['dag_run_id']}/taskInstances/"
                  "busiest_routes/xcomEntries/return_value",
                  params={"deserialize": "true"}).json()["value"]
    if isinstance(xcom, str):
        xcom = json.loads(xcom)
    assert xcom["routes"] > 0 and xcom["read_epoch_id"] >= 1
    # It read the Delta table at the version its event named: the version that epoch's
    # manifest history entry records.
    m = read_manifest(c.storage, c.layout)
    from checkpointing.records.two_phase_publish import published_tables
    assert xcom["table_version"] == published_tables(m, xcom["event_epoch_id"])[
        "gold_route_stats"], (xcom, m.history)


def ontime_oracle(location: str, version: int) -> list[tuple]:
    """airport_ontime's table, computed by pandas over the upstream table at ``version``."""
    from checkpointing.tables.delta import open_table
    from spark_jobs.flights.airport_ontime import ON_TIME_MINUTES, WINDOW_DAYS

    f = open_table(location, None, version).to_pandas(
        columns=["origin", "row_date", "arr_delay", "dep_time"])
    f["row_date"] = f["row_date"].astype(str)
    newest = f["row_date"].max()
    first = (date.fromisoformat(newest) - timedelta(days=WINDOW_DAYS - 1)).isoformat()
    f = f[(f.row_date >= first) & (f.row_date <= newest)]
    g = f.assign(on_time=(f.arr_delay <= ON_TIME_MINUTES).astype(int),
                 cancelled=f.dep_time.isna().astype(int)).groupby("origin").agg(
        flights=("origin", "size"), on_time=("on_time", "sum"), cancelled=("cancelled", "sum"))
    return sorted((o, int(r.flights), int(r.on_time), int(r.cancelled), newest)
                  for o, r in g.iterrows())


def _asset_triggered_runs(sa, dag: str) -> list[dict]:
    """The DAG's runs once none is left to run (the asset-triggered ones), each a success."""
    deadline = time.time() + 300
    while time.time() < deadline:
        runs = sa.get(f"/api/v2/dags/{dag}/dagRuns").json()["dag_runs"]
        if runs and all(r["state"] in ("success", "failed") for r in runs):
            break
        time.sleep(3)
    assert runs and all(r["state"] == "success" for r in runs), (runs, sa.tail())
    return runs


def test_a_downstream_dag_continues_the_pipeline_from_its_table(af):
    """dags/airport_ontime.py reads flights_daily's gold_flights_enriched incrementally:
    its asset-triggered epochs read on from the version the one before consumed (through
    the backfill's promotion, one replacing commit); a run killed after its snapshot is
    retried, reads the same pinned version, and its table equals pandas over the upstream
    table at that version."""
    from checkpointing.tables.delta import open_table

    sa, tmp = af
    down = Coordinator(LocalStorage(tmp / "ckpt"), "airport_ontime")
    upstream = f"file://{tmp}/data/tables/gold_flights_enriched"
    runs = _asset_triggered_runs(sa, "airport_ontime")
    assert all(r["run_type"] == "asset_triggered" for r in runs)
    completed = [b for b in down.barriers() if down.status(b.epoch_id) == "completed"]
    pins = [b.table_version("flights").version for b in completed]
    # Airflow hands the events that arrive while a run is active to one next run, so how
    # many epochs they make depends on timing: at least one; the triggered run below reads
    # on from the last of them.
    assert pins == sorted(pins) and len(completed) >= 1, pins
    offsets = [down.completed_handles(b.epoch_id)["ontime"].table_offsets["flights"]
               for b in completed if down.completed_handles(b.epoch_id)]
    assert offsets[-1].version == pins[-1] and offsets[-1].snapshot_id is None

    run = sa.trigger("airport_ontime", "2013-02-01T00:00:00Z",
                     {"checkpoint": {"fault_inject": "ontime:1"}})
    assert sa.wait_run("airport_ontime", run) == "success", sa.tail()
    assert sa.task_tries("airport_ontime", run)["ontime"] == ("success", 2)
    epoch = down.latest_completed()
    pinned = down.barrier(epoch).table_version("flights").version
    # at least what the asset-triggered epochs read, at most the table's newest version
    # (flights_daily may have committed again since this run began)
    assert pins[-1] <= pinned <= open_table(upstream, None).version()
    got = open_table(f"file://{tmp}/data/tables/gold_airport_ontime", None).to_pandas()
    assert sorted((r.origin, int(r.flights), int(r.on_time), int(r.cancelled), r.window_end)
                  for r in got.itertuples()) == ontime_oracle(upstream, pinned)
    read = down.completed_handles(epoch)["ontime"].metrics["table_inputs"]["flights"]
    assert read["to_version"] == pinned and not read["full"]


def test_a_dag_of_views_maintains_each_query_from_the_table_s_changes(af):
    """dags/flight_views.py: two views declared by their SQL over flights_daily's table,
    no job code. Their asset-triggered epochs build and then maintain them; a run whose
    first view is killed after its snapshot is retried; after it, each view's Delta table
    equals DuckDB's run of the same query (as the epoch's barrier records it) over the
    upstream table at the version the epoch pinned, and each handle records the refresh
    the planner chose and why."""
    import duckdb

    from checkpointing.tables.delta import open_table

    sa, tmp = af
    views = Coordinator(LocalStorage(tmp / "ckpt"), "flight_views")
    upstream = f"file://{tmp}/data/tables/gold_flights_enriched"
    _asset_triggered_runs(sa, "flight_views")
    run = sa.trigger("flight_views", "2013-02-01T00:00:00Z",
                     {"checkpoint": {"fault_inject": "route_delays:1"}})
    assert sa.wait_run("flight_views", run) == "success", sa.tail()
    assert sa.task_tries("flight_views", run)["route_delays"] == ("success", 2)
    epoch = views.latest_completed()
    barrier = views.barrier(epoch)
    pinned = barrier.table_version("flights").version
    flights = open_table(upstream, None, pinned).to_pandas()  # noqa: F841 - DuckDB reads it
    handles = views.completed_handles(epoch)

    def norm(rows) -> list[tuple]:
        out = [tuple(None if v is None or v != v else round(float(v), 6)
                     if isinstance(v, float) else v for v in r) for r in rows]
        return sorted(out, key=lambda r: tuple(str(v) for v in r))

    for task, table in (("route_delays", "gold_route_delays"),
                        ("airline_reach", "gold_airline_reach")):
        view = barrier.plan[task].view
        assert view is not None
        want = duckdb.sql(view.sql).fetchall()
        got = open_table(f"file://{tmp}/data/tables/{table}", None).to_pandas()
        assert norm(got.itertuples(index=False)) == norm(want), (task, epoch)
        assert len(want) > 5
        refresh = handles[task].metrics["view"]
        assert refresh["refresh"] in ("incremental", "full") and refresh["reason"], refresh
        assert refresh["output_mode"] == "merge"


def test_the_lineage_graph_connects_the_pipelines(af):
    """From the OpenLineage events the provider sent alone: landing -> each flights_daily
    task -> its commit step -> each gold table -> airport_ontime's task -> its table, and
    the dimension files enrich reads -> enrich, with one writer (the commit step) of each
    table version; route_stats' killed try (the first test's) names its epoch and attempt
    in the checkpoint facet of its FAIL event."""
    sa, tmp = af
    events = [b["json"] for b in sa.lineage.received]
    edges: dict[tuple[str, str], set[tuple[str, str]]] = {}
    writers: dict[tuple[str, str], set[str]] = {}
    for ev in events:
        if ev["eventType"] != "COMPLETE" or "." not in ev["job"]["name"]:
            continue  # a DAG's own events: no datasets
        job = ("job", ev["job"]["name"])
        for i in ev.get("inputs", []):
            edges.setdefault((i["namespace"], i["name"]), set()).add(job)
        for o in ev.get("outputs", []):
            edges.setdefault(job, set()).add((o["namespace"], o["name"]))
            if "version" in o.get("facets", {}):
                key = (o["name"], o["facets"]["version"]["datasetVersion"])
                writers.setdefault(key, set()).add(ev["job"]["name"])

    def reachable(start: tuple[str, str]) -> set[tuple[str, str]]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    landing = reachable(("file", f"{tmp}/data/raw/flights/"))
    tasks = ["ingest_flights", "enrich", "route_stats", "carrier_stats", "validate",
             "checkpoint_commit"]
    assert {("job", f"{DAG}.{t}") for t in tasks} <= landing, sorted(landing)
    gold = {("file", f"{tmp}/data/tables/{t}") for t in
            ("gold_route_stats", "gold_carrier_stats", "gold_flights_enriched",
             "gold_airport_ontime")}
    assert gold <= landing, sorted(landing)  # airport_ontime's table too, across the DAGs
    assert ("job", "airport_ontime.ontime") in landing
    assert ("job", f"{DAG}.ingest_weather") in reachable(
        ("file", f"{tmp}/data/raw/weather/")), sorted(edges)
    # enrich's reference files, read whole every epoch, are its inputs too
    for dim in ("airlines", "airports"):
        assert ("job", f"{DAG}.enrich") in edges.get(
            ("file", f"{tmp}/data/raw/dims/{dim}.csv"), set()), sorted(edges)
    assert writers and all(len(jobs) == 1 and next(iter(jobs)).endswith(".checkpoint_commit")
                           for jobs in writers.values()), writers
    c = coord(tmp)
    killed = [ev["run"]["facets"]["dagCheckpoints_epoch"] for ev in events
              if ev["eventType"] == "FAIL" and ev["job"]["name"] == f"{DAG}.route_stats"]
    assert killed and killed[0]["epoch"] == 2 and killed[0]["attempt"] == 1, killed
    assert killed[0]["status"] == "failed" and c.status(2) == "completed", killed
    blob = json.dumps(events)
    assert f"{tmp}/ckpt" not in blob  # checkpoint storage's paths never leave


def _checkpoint_keys(c: Coordinator) -> dict[str, str]:
    """Every object of the pipeline's checkpoint storage but the unchecked scratch, with
    its etag: what a run with checkpointing disabled must leave as it found it."""
    scratch = f"{c.layout.base}unchecked/"
    return {o.key: o.etag for o in c.storage.list(c.layout.base)
            if not o.key.startswith(scratch)}


def _latest_table(c: Coordinator, output: str):
    """A gold table at its newest version (not the manifest's), read by delta-rs."""
    from checkpointing.tables.delta import open_table

    location = read_manifest(c.storage, c.layout).outputs[output].meta["table"]["location"]
    return open_table(location, None).to_pandas()


def test_a_run_with_checkpointing_disabled_publishes_the_same_tables_and_no_epoch(af):
    """The checkpoint switch (run conf ``{"checkpoint": {"enabled": false}}``): the same DAG
    and jobs run days 6-7 from the latest completed epoch's state without the checkpoint
    protocol. No epoch document is written or changed, the route table's newest version
    equals the oracle; the checkpointed run of the same days then publishes the same
    tables (both of them)."""
    sa, tmp = af
    c = coord(tmp)
    data = LocalStorage(tmp / "data")
    deadline = time.time() + 300  # the page test's run (2013-01-07) ends first
    while sa.get(f"/api/v2/dags/{DAG}/dagRuns",
                 params={"state": ["queued", "running"]}).json()["total_entries"]:
        assert time.time() < deadline, sa.tail()
        time.sleep(2)
    land(data, [date(2013, 1, 6), date(2013, 1, 7)], dims=False, seed=9)
    before, latest = _checkpoint_keys(c), c.latest_completed()
    run = sa.trigger(DAG, "2013-01-08T00:00:00Z", {"checkpoint": {"enabled": False}})
    assert sa.wait_run(DAG, run) == "success", sa.tail()
    tries = sa.task_tries(DAG, run)
    assert tries["checkpoint_commit"][0] == tries["checkpoint_timeout"][0] == "skipped"
    assert tries["route_stats"] == ("success", 1), tries
    assert _checkpoint_keys(c) == before and c.latest_completed() == latest
    assert list(c.storage.list(f"{c.layout.base}unchecked/"))  # its files, in its scratch
    rows, _, _ = oracle.clean_flights(oracle.raw_files(data, "2013-01-08"))
    keys = {"gold_route_stats": ["origin", "dest"], "gold_carrier_stats": ["carrier"]}
    unchecked = {output: _latest_table(c, output)[k + oracle.METRIC_COLS].sort_values(k)
                 .reset_index(drop=True) for output, k in keys.items()}
    # Route statistics do not depend on the earlier tests' carrier fix: against the oracle.
    pd.testing.assert_frame_equal(unchecked["gold_route_stats"],
                                  oracle.stats(rows, keys["gold_route_stats"]),
                                  check_dtype=False, check_exact=False, rtol=1e-9)

    checked = sa.trigger(DAG, "2013-01-08T00:00:01Z")  # the same days, checkpointed
    assert sa.wait_run(DAG, checked) == "success", sa.tail()
    assert c.latest_completed() > latest
    for output, k in keys.items():
        got = oracle.published(c, output)[k + oracle.METRIC_COLS].sort_values(k) \
            .reset_index(drop=True)
        pd.testing.assert_frame_equal(got, unchecked[output], check_dtype=False,
                                      check_exact=False, rtol=1e-9)


def test_epoch_statistics_reach_a_statsd_receiver(af):
    """Flink's checkpoint statistics through Airflow's own metrics facility (StatsD here,
    with InfluxDB-style tags): one run whose route_stats try 1 dies after its snapshot and
    is retried, then an epoch aborted over REST. The figures equal the epochs' documents;
    no tag holds a path."""
    sa, tmp = af
    c = coord(tmp)
    _wait_until_no_run_is_active(sa)
    time.sleep(1)
    sa.statsd.lines.clear()
    run = sa.trigger(DAG, "2013-01-09T00:00:00Z",
                     {"checkpoint": {"fault_inject": "route_stats:1"}})
    assert sa.wait_run(DAG, run) == "success", sa.tail()
    epoch = max(b.epoch_id for b in c.barriers() if b.run_id == run)
    meta, barrier = c.metadata(epoch), c.barrier(epoch)
    handles = c.completed_handles(epoch)
    deadline = time.time() + 30  # UDP: the datagrams of the last processes
    while time.time() < deadline and not [
            m for m in sa.statsd.metrics("airflow.dag_checkpoints.epoch.completed")]:
        time.sleep(0.5)
    got = [m for m in sa.statsd.metrics("airflow.dag_checkpoints.")
           if m.tags.get("pipeline") == DAG]
    by = {}
    for m in got:
        by.setdefault(m.name.removeprefix("airflow.dag_checkpoints."), []).append(m)
    assert [m.value for m in by["epoch.completed"]] == [1.0], got
    duration = (parse_iso(meta.decided_at) - parse_iso(barrier.created_at)) * 1000
    assert [round(m.value) for m in by["epoch.duration"]] == [round(duration)]
    assert [m.value for m in by["epoch.state_size"]] == [
        sum(h.state_size for h in handles.values())]
    # state uploaded and outputs staged are separate figures, adding up to what was written
    uploaded = sum(h.state_bytes_uploaded for h in handles.values())
    staged = sum(h.outputs_staged_bytes for h in handles.values())
    assert [m.value for m in by["epoch.incremental_size"]] == [uploaded]
    assert [m.value for m in by["epoch.outputs_staged_size"]] == [staged]
    assert staged > 0 and uploaded + staged == sum(h.bytes_written for h in handles.values())
    # one acknowledgement per task (route_stats: its second try's), with its own timings
    runs = {m.tags["task"]: m.value for m in by["task.run"]}
    assert runs == pytest.approx({t: h.timings["run_ms"] for t, h in handles.items()},
                                 abs=1)
    assert handles["route_stats"].attempt == 2
    restored = sorted(m.tags["task"] for m in by["task.restored"])
    assert restored == sorted(t for t, h in handles.items()
                              if (h.restored_from or {}).get("epoch_id") is not None)
    assert {m.tags["task"]: m.value for m in by["task.state_size"]} == {
        t: h.state_size for t, h in handles.items()}
    assert by["table.commits"] and {m.tags["output"] for m in by["table.commit"]} == {
        o for h in handles.values() for o, ref in h.outputs.items() if "table" in ref.meta}
    # the timer is one per new table version: a publish that committed nothing is neither
    assert len(by["table.commit"]) == sum(m.value for m in by["table.commits"])

    # an abort decided by the api-server
    from checkpointing import plan_from_edges

    stuck = c.begin_epoch(plan_from_edges({"t": []}), "metrics-abort", lineage="drill2")
    r = sa.post(f"{API}/epochs/{stuck.epoch_id}/abort", {"reason": "metrics"})
    assert r.status_code == 200, r.text
    deadline = time.time() + 10
    while time.time() < deadline and not sa.statsd.metrics(
            "airflow.dag_checkpoints.epoch.aborted"):
        time.sleep(0.5)
    aborted = [m for m in sa.statsd.metrics("airflow.dag_checkpoints.epoch.aborted")]
    assert [(m.value, m.tags.get("reason"), m.tags.get("pipeline")) for m in aborted] == [
        (1.0, "cancelled", DAG)]
    every_tag = {v for m in sa.statsd.metrics("airflow.dag_checkpoints.")
                 for v in m.tags.values()}
    assert not any(str(tmp) in v or "file:" in v for v in every_tag), every_tag


def test_a_try_killed_outright_is_tied_to_its_epoch_in_lineage(af):
    """enrich's first try is SIGKILLed once it announced its epoch (the hang drill holds it
    before its acknowledgement): no failure code of ours runs in a process that is gone, and the
    scheduler's FAIL event runs none either. The RUNNING event the try sent once its epoch
    was known carries the facet with the epoch and the attempt under the try's own run id,
    the id of its START event; the retry completes the epoch."""
    import signal

    sa, tmp = af
    c = coord(tmp)
    _wait_until_no_run_is_active(sa)
    before = len(sa.lineage.received)  # earlier runs' events (their epochs may be gone)
    run = sa.trigger(DAG, "2013-01-11T00:00:00Z",
                     {"checkpoint": {"fault_inject": "enrich:1:hang"}})

    def running_event() -> dict | None:
        for body in sa.lineage.received[before:]:
            ev = body["json"]
            facet = ev["run"].get("facets", {}).get("dagCheckpoints_epoch")
            if ev["eventType"] == "RUNNING" and ev["job"]["name"] == f"{DAG}.enrich" \
                    and facet and facet["attempt"] == 1 and c.barrier(facet["epoch"]).run_id \
                    == run:
                return ev
        return None

    deadline = time.time() + 600
    while (announced := running_event()) is None:
        assert time.time() < deadline and sa.run_state(DAG, run) in ("queued", "running"), \
            sa.tail()
        time.sleep(2)
    ti = sa.get(f"/api/v2/dags/{DAG}/dagRuns/{run}/taskInstances/enrich").json()
    # The try's process: the task runner titles itself "airflow worker -- <ti id>".
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and f"airflow worker -- {ti['id']}" in _cmdline(p)]
    epoch = announced["run"]["facets"]["dagCheckpoints_epoch"]["epoch"]
    # Killed as soon as it announced its epoch: whether its job has run yet or hangs in
    # the drill, the try is gone before it acknowledged (with no new input, the job
    # writes no state file to wait for).
    assert pids, f"no process of try {ti['try_number']} of enrich"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    assert sa.wait_run(DAG, run) == "success", sa.diagnose(DAG, run)

    facet = announced["run"]["facets"]["dagCheckpoints_epoch"]
    assert (facet["status"], facet["lineage"], facet["pipeline"]) == ("running", "main", DAG)
    assert c.status(epoch) == "completed" and c.completed_handles(epoch)["enrich"].attempt == 2
    events = [b["json"] for b in sa.lineage.received
              if b["json"]["job"]["name"] == f"{DAG}.enrich"]
    killed = [ev for ev in events if ev["run"]["runId"] == announced["run"]["runId"]]
    assert "START" in {ev["eventType"] for ev in killed}, killed
    assert "COMPLETE" not in {ev["eventType"] for ev in killed}, killed


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
