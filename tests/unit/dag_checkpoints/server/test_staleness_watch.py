"""The scheduler's staleness watcher: a pipeline with no runs at all still reports its
last-completed age and pages once; one "resolved" notice when an epoch completes again.
Airflow's own StatsD client and HttpNotifier, to real receivers, in a process of its own
(Airflow's metrics are configured once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench.harness.airflow_env import ROOT
from bench.harness.sinks import WebhookSink
from bench.harness.statsd_sink import StatsdSink
from checkpointing import CheckpointConfig, Coordinator, LocalStorage
from tests.support.helpers import DIAMOND, run_epoch

DAY = 86400.0
WATCH = """
import json, sys
from dag_checkpoints.shared.settings import CheckpointSettings
from dag_checkpoints.server.staleness_watch import watch_once
settings = CheckpointSettings.from_kwargs(json.loads(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    print(json.dumps(watch_once({"quiet_dag": settings})))
"""


def _watch(settings_kwargs: dict, times: int, env: dict[str, str]) -> list[dict]:
    r = subprocess.run([sys.executable, "-c", WATCH, json.dumps(settings_kwargs), str(times)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_a_pipeline_without_runs_reports_its_age_pages_once_and_resolves_once(tmp_path):
    from dag_checkpoints import AlertSettings, CheckpointSettings

    statsd, hook = StatsdSink(), WebhookSink()
    try:
        config = CheckpointConfig(max_epoch_age_seconds=DAY)
        # Its last epoch completed three days ago; nothing has run since.
        past = Coordinator(LocalStorage(tmp_path / "ckpt"), "quiet", config,
                           clock=lambda: time.time() - 3 * DAY)
        run_epoch(past, DIAMOND, tmp=tmp_path, run_id="r1")
        settings = CheckpointSettings(
            "quiet", storage=f"file://{tmp_path}/ckpt", config=config, dag_id="quiet_dag",
            alerts=AlertSettings(webhook_conn_id="ckpt_webhook", webhook_endpoint="/alerts"))
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}",
               "AIRFLOW__METRICS__STATSD_ON": "True",
               "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
               "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
               "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
               "AIRFLOW_CONN_CKPT_WEBHOOK": hook.url}
        ages = _watch(settings.to_kwargs(), 3, env)
        assert [a["quiet_dag"] > 3 * DAY - 60 for a in ages] == [True] * 3
        time.sleep(0.5)  # UDP
        gauges = [m for m in statsd.metrics("airflow.dag_checkpoints.last_completed_age")
                  if m.kind == "g"]
        assert len(gauges) == 3 and all(g.value > 3 * DAY - 60 for g in gauges), gauges
        assert gauges[0].tags == {"pipeline": "quiet", "dag_id": "quiet_dag"}
        texts = [r["json"]["text"] for r in hook.received]
        assert len(texts) == 1 and "no checkpoint epoch of quiet completed for 3.0 days" in \
            texts[0], texts  # three looks, one page

        # An epoch completes again: one resolved notice, however often it is looked at.
        now = Coordinator(LocalStorage(tmp_path / "ckpt"), "quiet", config)
        run_epoch(now, DIAMOND, tmp=tmp_path, run_id="r2")
        ages = _watch(settings.to_kwargs(), 2, env)
        assert all(a["quiet_dag"] < 60 for a in ages), ages
        texts = [r["json"]["text"] for r in hook.received]
        assert len(texts) == 2 and "quiet complete again" in texts[1], texts
        assert hook.received[1]["json"]["alert"]["resolved"] is True
        assert str(tmp_path) not in json.dumps(hook.received)
    finally:
        statsd.stop()
        hook.stop()


def test_the_watcher_watches_in_a_scheduler_only_stops_with_it_and_can_be_turned_off(
        monkeypatch):
    """Airflow calls the listener object as each job starts and before it stops; the job's
    type (set by its runner after it started) decides at the first look whether the
    watcher goes on; a task's start is not a job and starts nothing."""
    from types import SimpleNamespace

    from dag_checkpoints.server import staleness_watch

    looks: list[int] = []
    monkeypatch.setattr(staleness_watch, "checkpointed_dags", lambda: {})
    monkeypatch.setattr(staleness_watch, "watch_once", lambda dags: looks.append(1))

    task = staleness_watch.StalenessWatch(period=0.05)
    task.on_starting(component=object())  # Airflow's task-runner marker: not a job
    assert task.thread is None

    triggerer = staleness_watch.StalenessWatch(period=0.05)
    job = SimpleNamespace(job_type=None)  # the runner sets the type after on_starting
    triggerer.on_starting(component=job)
    job.job_type = "TriggererJob"
    assert triggerer.thread is not None
    triggerer.thread.join(5)
    assert not triggerer.thread.is_alive() and looks == []  # ended at its first look

    scheduler = staleness_watch.StalenessWatch(period=0.05)
    job = SimpleNamespace(job_type=None)
    scheduler.on_starting(component=job)
    job.job_type = staleness_watch.SCHEDULER
    thread = scheduler.thread
    assert thread is not None and thread.daemon
    scheduler.on_starting(component=job)
    assert scheduler.thread is thread  # once per process
    deadline = time.monotonic() + 5
    while len(looks) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(looks) >= 2
    scheduler.before_stopping(component=SimpleNamespace(job_type="other"))
    assert thread.is_alive()  # another job's end is not this one's
    scheduler.before_stopping(component=job)
    assert not thread.is_alive()

    monkeypatch.setenv("AIRFLOW__DAG_CHECKPOINTS__STALENESS_CHECK_SECONDS", "0")
    off = staleness_watch.StalenessWatch()
    off.on_starting(component=SimpleNamespace(job_type=staleness_watch.SCHEDULER))
    assert off.thread is None


def test_the_plugin_registers_a_watcher_object():
    from dag_checkpoints.server import plugin, staleness_watch

    watchers = [x for x in plugin.DagCheckpointsPlugin.listeners
                if isinstance(x, staleness_watch.StalenessWatch)]
    assert len(watchers) == 1
