"""Flink's checkpoint statistics reach an OpenTelemetry receiver through Airflow's own
metrics facility: an `airflow standalone` with `[metrics] otel_on` and the standard OTLP
endpoint variable, one daily epoch of flights_daily, the figures received over OTLP/HTTP
equal the epoch's documents, those emitted by the short-lived task processes included."""

from __future__ import annotations

import time
from datetime import date

import pytest

from bench.harness.airflow_env import ROOT
from bench.harness.airflow_standalone import Standalone, connect_env
from checkpointing import Coordinator, LocalStorage
from spark_jobs.flights.landing import land
from tests.support.otlp_sink import OtlpSink

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
DAG = "flights_daily"
PREFIX = "airflow.dag_checkpoints."


def _last(points, name: str) -> dict[tuple, float]:
    """The latest value of each series (cumulative sums and gauges are exported again at
    every interval)."""
    out = {}
    for p in points:
        if p.name == name:
            out[tuple(sorted(p.attributes.items()))] = (p.value, p.count)
    return out


def test_epoch_statistics_reach_an_otlp_receiver(tmp_path, spark_connect):
    land(LocalStorage(tmp_path / "data"), [date(2013, 1, 1)], seed=3)
    otlp = OtlpSink()
    sa = Standalone(tmp_path / "airflow", CKPT_STORAGE=f"file://{tmp_path}/ckpt",
                    CKPT_DATA=f"file://{tmp_path}/data", FLIGHTS_RETRIES="0",
                    AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
                    AIRFLOW__METRICS__OTEL_ON="True",
                    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=otlp.endpoint,
                    OTEL_METRIC_EXPORT_INTERVAL="1000",
                    **connect_env(spark_connect))
    try:
        sa.start()
        run = sa.trigger(DAG, "2013-01-02T00:00:00Z")
        assert sa.wait_run(DAG, run) == "success", sa.tail()
        c = Coordinator(LocalStorage(tmp_path / "ckpt"), DAG)
        epoch = max(b.epoch_id for b in c.barriers() if b.run_id == run)
        handles = c.completed_handles(epoch)
        deadline = time.time() + 60
        while time.time() < deadline and len(
                _last(otlp.named(PREFIX), PREFIX + "task.state_size")) < len(handles):
            time.sleep(1)
    finally:
        sa.stop()
        otlp.stop()
    points = [p for p in otlp.named(PREFIX) if p.attributes.get("pipeline") == DAG]
    names = {p.name for p in points}
    assert PREFIX + "epoch.completed" in names, sorted(names)
    assert [v for v, _ in _last(points, PREFIX + "epoch.completed").values()] == [1.0]
    assert [v for v, _ in _last(points, PREFIX + "epoch.state_size").values()] == [
        sum(h.state_size for h in handles.values())]
    # Every task's acknowledgement, emitted by its own short-lived process.
    sizes = {dict(k)["task"]: v for k, (v, _) in
             _last(points, PREFIX + "task.state_size").items()}
    assert sizes == {t: h.state_size for t, h in handles.items()}, sizes
    runs = {dict(k)["task"]: (v, n) for k, (v, n) in _last(points, PREFIX + "task.run").items()}
    assert {t: n for t, (_, n) in runs.items()} == {t: 1 for t in handles}
    assert {t: v for t, (v, _) in runs.items()} == pytest.approx(
        {t: h.timings["run_ms"] for t, h in handles.items()}, abs=1)
    every = {v for p in otlp.points for v in p.attributes.values()}
    assert not any(str(tmp_path) in v or "file:" in v for v in every), every
