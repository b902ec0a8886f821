"""A silently hanging task under a real `airflow standalone`: the DAG's Deadline Alert fires
in the triggerer, the epoch is aborted with reason ``timeout`` naming the tasks that did not
acknowledge, and exactly one alert reaches the webhook and the mail server, although the
commit step sees the abort again later. The run then fails: the failure budget is spent."""

from __future__ import annotations

import time
from datetime import date

import pytest

from checkpointing import Coordinator, LocalStorage
from checkpointing.alerts import read_alert
from spark_jobs.landing import land
from tests.airflow_standalone import Standalone
from tests.sinks import SmtpSink, WebhookSink

pytestmark = pytest.mark.slow
TIMEOUT_S = 45


@pytest.fixture(scope="module")
def af(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timeout")
    land(LocalStorage(tmp / "data"), [date(2013, 1, 1)], seed=3)
    hook, smtp = WebhookSink(), SmtpSink()
    sa = Standalone(
        tmp / "airflow",
        CKPT_STORAGE=f"file://{tmp}/ckpt", CKPT_DATA=f"file://{tmp}/data",
        FLIGHTS_EPOCH_TIMEOUT_SECONDS=str(TIMEOUT_S), FLIGHTS_RETRIES="0",
        CKPT_FAULT_HANG_SECONDS="100",
        CKPT_ALERT_WEBHOOK_CONN="ckpt_webhook", CKPT_ALERT_WEBHOOK_ENDPOINT="/alerts",
        AIRFLOW_CONN_CKPT_WEBHOOK=hook.url,
        CKPT_ALERT_EMAIL="oncall@example.com", CKPT_ALERT_SMTP_CONN="ckpt_smtp",
        AIRFLOW_CONN_CKPT_SMTP=smtp.conn_json(),
    )
    try:
        sa.start()
        yield sa, tmp, hook, smtp
    finally:
        sa.stop()
        hook.stop()
        smtp.stop()


def test_hanging_task_times_out_and_alerts_once(af):
    sa, tmp, hook, smtp = af
    run_id = sa.trigger("flights_daily", "2013-01-02T00:00:00Z",
                        {"checkpoint": {"fault_inject": "ingest_flights:1:hang"}})
    c = Coordinator(LocalStorage(tmp / "ckpt"), "flights_daily")
    deadline = time.time() + TIMEOUT_S + 120
    while time.time() < deadline and read_alert(c.storage, c.layout, 1) is None:
        time.sleep(2)
    alert = read_alert(c.storage, c.layout, 1)
    assert alert is not None, sa.tail()
    assert alert.reason == "timeout" and alert.run_id == run_id
    # ingest_weather acknowledged; the hung task and everything downstream of it did not.
    assert alert.missing_tasks == ("carrier_stats", "enrich", "ingest_flights",
                                   "route_stats", "validate")
    meta = c.metadata(1)
    assert meta.status == "aborted" and meta.reason == "timeout"

    # The run goes on: the hung task wakes, its acknowledgement is refused, the commit
    # step sees the abort again, and the run fails because no failed epoch is tolerated.
    assert sa.wait_run("flights_daily", run_id, timeout=400) == "failed"
    tries = sa.task_tries("flights_daily", run_id)
    assert tries["ingest_flights"][0] == "failed"
    assert tries["checkpoint_commit"][0] == "failed"

    time.sleep(5)  # any late, duplicate delivery would have arrived by now
    assert len(hook.received) == 1, hook.received
    body = hook.received[0]
    assert body["path"] == "/alerts"
    assert "timed out" in body["json"]["text"] and "ingest_flights" in body["json"]["text"]
    assert body["json"]["alert"]["epoch_id"] == 1
    assert len(smtp.messages) == 1
    mail = smtp.messages[0]
    assert mail["To"] == "oncall@example.com"
    assert "epoch 1 of flights_daily timed out" in mail["Subject"]
    # Nothing was published by the aborted epoch.
    assert not c.storage.exists(c.layout.manifest)
