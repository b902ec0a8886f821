"""Epoch alerts and staleness notices, delivered once."""

from __future__ import annotations


def test_racing_announcers_deliver_an_alert_once(tmp_path):
    """The watchdog, the Deadline Alert's callback and a begin step may all announce one
    abort: the one whose alert record lands delivers, the others stay silent."""
    import threading

    from dag_checkpoints.notifications import AlertSettings, announce

    from bench.harness.race import race
    from checkpointing import CheckpointConfig, Coordinator, LocalStorage
    from tests.support.helpers import DIAMOND, FakeClock

    delivered: list[int] = []
    lock = threading.Lock()

    class Counting:
        def __init__(self, epoch_id: int):
            self.epoch_id = epoch_id

        def notify(self, context):
            with lock:
                delivered.append(self.epoch_id)

    class CountingSettings(AlertSettings):
        def notifiers(self, alert):
            return [Counting(alert.epoch_id)]

    clock = FakeClock()
    c = Coordinator(LocalStorage(tmp_path), "p", CheckpointConfig(timeout_seconds=10),
                    clock=clock)
    epochs = []
    for run in ("r1", "r2"):
        b = c.begin_epoch(DIAMOND, run)
        clock.advance(11)
        meta = c.abort(b.epoch_id, "timeout", "overdue")
        epochs.append((meta, b))
    settings = CountingSettings()
    results, errors = race(lambda i: announce(c, *epochs[i % 2], settings), 16)
    assert not errors, errors
    assert sorted(delivered) == [1, 2]
    assert sorted(a.epoch_id for a in results if a is not None) == [1, 2]


def test_a_stale_pipeline_is_announced_once_through_the_webhook(tmp_path, monkeypatch):
    """announce_stale, called by every begin and every abort, delivers through the same
    Airflow notifier as a timeout (a real HttpNotifier to a local receiver), once."""
    import json

    from dag_checkpoints.notifications import AlertSettings, announce, announce_stale

    from bench.harness.race import race
    from bench.harness.sinks import WebhookSink
    from checkpointing import CheckpointConfig, Coordinator, LocalStorage
    from tests.support.helpers import DIAMOND, FakeClock, run_epoch

    hook = WebhookSink()
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_WEBHOOK", hook.url)
    try:
        clock = FakeClock()
        c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p",
                        CheckpointConfig(max_epoch_age_seconds=3600), clock=clock)
        settings = AlertSettings(webhook_conn_id="ckpt_webhook", webhook_endpoint="/alerts")
        run_epoch(c, DIAMOND, tmp=tmp_path, run_id="r1")
        assert announce_stale(c, settings) is None
        clock.advance(7200)
        b = c.begin_epoch(DIAMOND, "r2")
        meta = c.abort(b.epoch_id, "declined", "no input")
        results, errors = race(lambda i: announce_stale(c, settings) if i % 2
                               else announce(c, meta, b, settings), 8)
        assert not errors, errors
        texts = [r["json"]["text"] for r in hook.received]
        assert len([t for t in texts if "completed for 2.0 hours" in t]) == 1, texts
        assert len([t for t in texts if "aborted (declined)" in t]) == 1, texts
        stale = [r["json"]["alert"] for r in hook.received if "last_epoch_id" in r["json"]["alert"]]
        assert stale[0]["last_epoch_id"] == 1 and stale[0]["max_age_seconds"] == 3600
        assert str(tmp_path) not in json.dumps(hook.received)  # no storage path in an alert
    finally:
        hook.stop()
