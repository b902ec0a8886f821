"""Silence pages, under a real `airflow standalone`: flights_daily deployed paused, its
last epoch completed long ago, no run at all. The scheduler's staleness watcher emits the
growing `last_completed_age` gauge to a StatsD receiver and pages the webhook once, within
the configured age plus one period; when an epoch completes again (written here with the
coordinator, as the unpaused DAG's next run would), exactly one "resolved" notice follows.
No Spark: nothing runs but Airflow's own components."""

from __future__ import annotations

import time

import pytest

from bench.harness.airflow_standalone import Standalone
from bench.harness.sinks import WebhookSink
from bench.harness.statsd_sink import StatsdSink
from checkpointing import CheckpointConfig, Coordinator, LocalStorage
from checkpointing.protocol.documents import parse_iso
from tests.support.helpers import DIAMOND, run_epoch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
DAG = "flights_daily"
MAX_AGE = 600.0
PERIOD = 3


def test_a_paused_dag_pages_once_and_resolves_once(tmp_path):
    config = CheckpointConfig(max_epoch_age_seconds=MAX_AGE)
    storage = LocalStorage(tmp_path / "ckpt")
    old = Coordinator(storage, DAG, config, clock=lambda: time.time() - 2 * MAX_AGE)
    first = run_epoch(old, DIAMOND, tmp=tmp_path, run_id="long_ago")
    hook, statsd = WebhookSink(), StatsdSink()
    sa = Standalone(tmp_path / "airflow", CKPT_STORAGE=f"file://{tmp_path}/ckpt",
                    CKPT_DATA=f"file://{tmp_path}/data",
                    FLIGHTS_MAX_EPOCH_AGE_SECONDS=str(MAX_AGE),
                    AIRFLOW__DAG_CHECKPOINTS__STALENESS_CHECK_SECONDS=str(PERIOD),
                    AIRFLOW__METRICS__STATSD_ON="True",
                    AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
                    AIRFLOW__METRICS__STATSD_PORT=str(statsd.port),
                    AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED="True",
                    CKPT_ALERT_WEBHOOK_CONN="ckpt_webhook", CKPT_ALERT_WEBHOOK_ENDPOINT="/alerts",
                    AIRFLOW_CONN_CKPT_WEBHOOK=hook.url)
    sa.env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "True"  # deployed paused
    try:
        sa.start()
        assert sa.get(f"/api/v2/dags/{DAG}").json()["is_paused"] is True

        def ages() -> list[float]:
            return [m.value for m in statsd.metrics("airflow.dag_checkpoints.last_completed_age")
                    if m.kind == "g" and m.tags.get("pipeline") == DAG]

        # The DAG is paused and the scheduler was just started: the first look pages.
        sa.wait_for(lambda: hook.received, 10 * PERIOD + 60, "the staleness alert")
        sa.wait_for(lambda: len(ages()) >= 3, 10 * PERIOD + 60, "three gauges")
        seen = ages()
        assert seen[0] > 2 * MAX_AGE - 120 and seen[-1] > seen[0], seen  # it grows
        time.sleep(3 * PERIOD)  # more looks, no second page
        assert len(hook.received) == 1, hook.received
        text = hook.received[0]["json"]["text"]
        assert f"no checkpoint epoch of {DAG} completed for" in text, text
        assert sa.get(f"/api/v2/dags/{DAG}/dagRuns").json()["total_entries"] == 0
        # What the Epochs page shows in its header: stale since the epoch's age passed the
        # maximum, the alert sent.
        listing = sa.get(f"/ckpt/api/dags/{DAG}/epochs").json()
        decided = parse_iso(first.decided_at)
        assert listing["stale"]["alerted"] is True
        assert listing["stale"]["last_epoch_id"] == first.epoch_id
        assert parse_iso(listing["stale"]["since"]) == pytest.approx(decided + MAX_AGE, abs=1)

        run_epoch(Coordinator(storage, DAG, config), DIAMOND, tmp=tmp_path, run_id="again")
        sa.wait_for(lambda: len(hook.received) >= 2, 10 * PERIOD + 60, "the resolved notice")
        time.sleep(3 * PERIOD)
        assert len(hook.received) == 2, hook.received
        assert f"{DAG} complete again" in hook.received[1]["json"]["text"]
        sa.wait_for(lambda: ages()[-1] < 120, 10 * PERIOD + 60, "the gauge's drop")
        assert sa.get(f"/ckpt/api/dags/{DAG}/epochs").json()["stale"] is None
    finally:
        sa.stop()
        hook.stop()
        statsd.stop()
