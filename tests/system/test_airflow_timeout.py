"""Checkpoint timeouts under a real `airflow standalone` on PostgreSQL, the database a
deployment runs (SQLite runs the other standalone modules).

Two runs whose first job hangs, triggered together: the second waits in the queue (the DAG
allows one active run) longer than the timeout. Each epoch is aborted with reason
``timeout`` by its watchdog, counted from its own barrier: the queued run is neither aborted
before it opens its epoch nor exempt after. The DAG's Deadline Alert also fires for both
runs (the second while still queued) and must leave the triggerer healthy: its callback once
returned a dict that Airflow could not store and killed the triggerer. Each timeout reaches
the webhook and the mail server exactly once, and the aborted epochs stay visible with their
alert after the commit step's retention.
"""

from __future__ import annotations

import json
from datetime import date

import pytest

from bench.harness.airflow_standalone import Standalone, connect_env
from bench.harness.pg import airflow_database
from bench.harness.sinks import SmtpSink, WebhookSink
from checkpointing import Coordinator, LocalStorage
from checkpointing.protocol.documents import parse_iso
from checkpointing.protocol.history import read_failure
from checkpointing.records.alerts import read_alert
from spark_jobs.flights.landing import land

pytestmark = pytest.mark.slow
#: The hang outlasts the timeout by 15 s: the watchdog and both Deadline Alerts fire while
#: the first run's job still hangs (the run waits out two hangs, one per run).
TIMEOUT_S = 18
HANG_S = 33
DAG = "flights_daily"
HANG = {"checkpoint": {"fault_inject": "ingest_flights:1:hang"}}


@pytest.fixture(scope="module")
def af(tmp_path_factory, spark_connect):
    tmp = tmp_path_factory.mktemp("timeout")
    land(LocalStorage(tmp / "data"), [date(2013, 1, 1), date(2013, 1, 2)], seed=3)
    db_env = airflow_database("ckpt_airflow_timeout")
    hook, smtp = WebhookSink(), SmtpSink()
    sa = Standalone(
        tmp / "airflow",
        CKPT_STORAGE=f"file://{tmp}/ckpt", CKPT_DATA=f"file://{tmp}/data",
        FLIGHTS_EPOCH_TIMEOUT_SECONDS=str(TIMEOUT_S), FLIGHTS_RETRIES="0",
        FLIGHTS_TOLERABLE_FAILED_EPOCHS="5", FLIGHTS_RETAINED_EPOCHS="1",
        CKPT_FAULT_HANG_SECONDS=str(HANG_S),
        CKPT_ALERT_WEBHOOK_CONN="ckpt_webhook", CKPT_ALERT_WEBHOOK_ENDPOINT="/alerts",
        AIRFLOW_CONN_CKPT_WEBHOOK=hook.url,
        CKPT_ALERT_EMAIL="oncall@example.com", CKPT_ALERT_SMTP_CONN="ckpt_smtp",
        AIRFLOW_CONN_CKPT_SMTP=smtp.conn_json(),
        **db_env, **connect_env(spark_connect),
    )
    try:
        sa.start()
        yield sa, tmp, hook, smtp
    finally:
        sa.stop()
        hook.stop()
        smtp.stop()


def test_timeouts_of_running_and_queued_runs_alert_once_and_triggerer_survives(af):
    sa, tmp, hook, smtp = af
    runs = [sa.trigger(DAG, f"2013-01-0{d}T00:00:00Z", HANG) for d in (2, 3)]
    # Both runs end once their hung task wakes and the commit step sees the abort; the
    # failure budget (5) is not spent, so the runs themselves succeed or fail by task state.
    for run in runs:
        sa.wait_run(DAG, run, timeout=HANG_S * 2 + 400)
    c = Coordinator(LocalStorage(tmp / "ckpt"), DAG)
    # Retention (after each commit) deleted the aborted epochs' files: what is left of them
    # is their failure record and alert, which is what operators look at.
    records = [read_failure(c.storage, c.layout, e) for e in (1, 2)]
    assert all(records), sa.tail()
    by_run = {r.run_id: r for r in records}
    assert set(by_run) == set(runs), by_run

    for run in runs:
        rec = by_run[run]
        assert rec.reason == "timeout", rec
        # Aborted at its own deadline (counted from its barrier), not before.
        assert parse_iso(rec.decided_at) >= parse_iso(rec.deadline)
        assert parse_iso(rec.decided_at) < parse_iso(rec.deadline) + 60
        assert parse_iso(rec.deadline) - parse_iso(rec.created_at) == pytest.approx(TIMEOUT_S)
        assert rec.tasks["ingest_flights"].status == "not_acked"
        alert = read_alert(c.storage, c.layout, rec.epoch_id)
        assert alert is not None and alert.reason == "timeout" and alert.run_id == run
        assert "ingest_flights" in alert.missing_tasks

    # The second run waited in the queue longer than the timeout before opening its epoch.
    queued = sa.get(f"/api/v2/dags/{DAG}/dagRuns/{runs[1]}").json()["queued_at"]
    assert parse_iso(by_run[runs[1]].created_at) - _ts(queued) > TIMEOUT_S

    # The Deadline Alert's callback found the settings the begin step registered (its
    # kwargs hold the pipeline id only) and did not fail on them.
    registered = sa.get(f"/api/v2/variables/dag_checkpoints.settings.{DAG}").json()
    assert json.loads(registered["value"])["storage"] == f"file://{tmp}/ckpt", registered
    # ... and ran with them: each run's callback looked for its open epoch of this DAG
    # (found none, or decided it or found it decided by its watchdog), which needs its
    # storage. The scheduler fires a callback when it next looks, so it may end after its run.

    def callbacks_done() -> int:
        log = sa.tail(2_000_000)
        assert "checkpoint deadline callback failed" not in log, log[-3000:]
        done = log.count(f"of {DAG} (queued, or already decided)") + log.count(
            f"of {DAG} is aborted (timeout)")
        return done if done >= 2 else 0

    sa.wait_for(callbacks_done, 120, "both runs' Deadline Alert callbacks")
    health = sa.get("/api/v2/monitor/health", user=None).json()
    assert health["triggerer"]["status"] == "healthy", health
    log = sa.tail(2_000_000)  # a callback result the database cannot store (SQLite, psycopg2)
    assert "Error binding parameter" not in log and "can't adapt type" not in log

    # Every path that announces has run by now, so a duplicate would be here already: the
    # watchdogs ended before their runs did, and both runs' Deadline Alerts (queued_at +
    # TIMEOUT_S) fired while the first run's job still hung (HANG_S > TIMEOUT_S). That
    # racing announcers deliver once is checked without Airflow in
    # tests/unit/dag_checkpoints/notifications/test_notifications.py.
    alerted = sorted(b["json"]["alert"]["epoch_id"] for b in hook.received)
    assert alerted == [1, 2], hook.received
    assert all("timed out" in b["json"]["text"] for b in hook.received)
    assert sorted(m["Subject"] for m in smtp.messages) == [
        f"checkpoint epoch {e} of {DAG} timed out" for e in (1, 2)]
    assert not c.storage.exists(c.layout.manifest)  # nothing was published
    events = sa.get("/api/v2/assets/events", params={"source_dag_id": DAG}).json()
    assert events["total_entries"] == 0, events  # an aborted epoch emits no asset event

    # They stay listed, with their alert.
    listing = sa.get(f"/ckpt/api/dags/{DAG}/epochs").json()
    rows = {r["epoch_id"]: r for r in listing["epochs"]}
    assert listing["total"] == len(rows) == 2
    assert all(rows[e]["status"] == "aborted" and rows[e]["reason"] == "timeout"
               for e in (1, 2))
    one = sa.get(f"/ckpt/api/dags/{DAG}/epochs/1").json()
    assert one["alert"]["reason"] == "timeout" and one["alert"]["epoch_id"] == 1


def _ts(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
