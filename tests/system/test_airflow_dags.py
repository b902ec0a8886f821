"""The flights_daily DAG under `airflow dags test`: checkpoint storage and the published
outputs are asserted on, not log text.

A run at logical date T consumes the raw files of the days before T (its data interval
ends at T), so the run of 2013-01-02 processes 2013-01-01. The tasks run on the test
process's Spark Connect server (the deployment's mode); the aircraft DAG's module runs its
tasks in local mode and the cluster module in submit mode."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import date

import pytest

from bench.harness import oracle
from bench.harness.airflow_env import AIRFLOW, ROOT, airflow, airflow_env, migrate
from bench.harness.airflow_standalone import connect_env
from checkpointing import Coordinator, LocalStorage, read_manifest
from checkpointing.views.stats import epoch_or_history_stats
from spark_jobs.flights.landing import land


@pytest.fixture
def af(tmp_path, spark_connect):
    land(LocalStorage(tmp_path / "data"), [date(2013, 1, 1)], malformed_rate=0.01, seed=1)
    env = airflow_env(tmp_path / "airflow", CKPT_STORAGE=f"file://{tmp_path}/ckpt",
                      CKPT_DATA=f"file://{tmp_path}/data", FLIGHTS_RETRY_DELAY_SECONDS="1",
                      FLIGHTS_RETRIES="1", **connect_env(spark_connect))
    migrate(env)
    return env, tmp_path


def test_a_run_is_one_completed_epoch_and_a_retry_restores_without_double_counting(af):
    """Two `airflow dags test` runs (each one costs an Airflow process and a DAG run, so the
    second continues from the first): a run is one completed epoch over the days before its
    logical date; in the next, a task that dies after its snapshot is retried, restores from
    the last completed epoch and counts nothing twice. Then a drill refused, begun nowhere."""
    env, tmp = af
    land(LocalStorage(tmp / "data"), [date(2013, 1, 2)], dims=False)  # not the first run's
    r = airflow(env, "dags", "test", "flights_daily", "2013-01-02")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    c = Coordinator(LocalStorage(tmp / "ckpt"), "flights_daily")
    assert c.latest_completed() == 1
    b = c.barrier(1)
    assert b.run_id.startswith("manual__") or "2013-01-02" in b.run_id
    assert b.data_interval["end"].startswith("2013-01-02")
    m = read_manifest(c.storage, c.layout)
    assert m.epoch_id == 1 and set(m.outputs) >= {"gold_route_stats", "gold_carrier_stats",
                                                   "gold_flights_enriched"}
    handles = c.completed_handles(1)
    assert all(h.attempt == 1 for h in handles.values())
    assert sorted(handles["ingest_flights"].offsets["files"]) == ["raw/flights/2013-01-01.csv"]
    # Each task records what it spent before its job (for the DAG run bench's split).
    for h in handles.values():
        over = h.metrics["task_overhead_ms"]
        assert over["session_ms"] > 0 and over["process_age_ms"] > 0, over

    # route_stats' first try dies after its snapshot, before acknowledging.
    env2 = {**env, "CKPT_FAULT_INJECT": "route_stats:1"}
    r = airflow(env2, "dags", "test", "flights_daily", "2013-01-03")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert c.latest_completed() == 2
    handles = c.completed_handles(2)
    assert handles["route_stats"].attempt == 2
    assert handles["route_stats"].restored_from == {"epoch_id": 1}
    assert handles["ingest_flights"].attempt == 1
    assert sorted(handles["ingest_flights"].offsets["files"]) == [  # the files consumed so far
        "raw/flights/2013-01-01.csv", "raw/flights/2013-01-02.csv"]
    # No double counting: the published tables equal an independent pandas computation
    # over the files these two epochs consumed (days 1 and 2).
    data = LocalStorage(tmp / "data")
    oracle.assert_gold_matches_oracle(c, data, ["origin", "dest"], "gold_route_stats",
                                      until="2013-01-03")
    oracle.assert_gold_matches_oracle(c, data, ["carrier"], "gold_carrier_stats",
                                      until="2013-01-03")

    # A drill asked of a deployment with drills off is refused before its epoch begins:
    # every step fails in one line saying so, no epoch is begun (none aborted, none
    # counted against tolerable_failed_epochs) and no alert is recorded.
    refused = {**env, "CKPT_FAULT_INJECT": "route_stats:1",
               "AIRFLOW__DAG_CHECKPOINTS__DRILLS": "False"}
    before = c.epoch_ids()
    r = airflow(refused, "dags", "test", "flights_daily", "2013-01-03T12:00:00")
    out = r.stdout + r.stderr
    assert "drills are off in this deployment: the run is refused before its epoch " \
        "begins" in out, out[-4000:]
    assert c.epoch_ids() == before and c.latest_completed() == 2
    assert c.registry().lineage("main").consecutive_failed == 0
    assert all(c.catalog.alert(e) is None for e in before)

    # The whole `dags test` process SIGKILLed once route_stats wrote its state, before its
    # acknowledgement: the next run (the next interval) is not refused for the pending
    # epoch; it aborts it as runner_lost (its holder, a process of this host, is dead) and
    # continues from epoch 2, with nobody running `ckpt abort`.
    land(data, [date(2013, 1, 3)], dims=False)
    hang = {**env, "CKPT_FAULT_INJECT": "route_stats:1:hang", "CKPT_FAULT_HANG_SECONDS": "600"}
    killed = subprocess.Popen([AIRFLOW, "dags", "test", "flights_daily", "2013-01-04"],
                              env=hang, cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    state = tmp / "ckpt" / "flights_daily" / "epochs" / "0000000003" / "state" / "route_stats"
    deadline = time.monotonic() + 600
    while not (state.is_dir() and any(p.is_file() for p in state.rglob("*"))):
        assert killed.poll() is None and time.monotonic() < deadline, killed.returncode
        time.sleep(0.5)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    assert c.status(3) == "pending"
    r = airflow(env, "dags", "test", "flights_daily", "2013-01-05")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    meta = epoch_or_history_stats(c, 3)  # retention deleted its files: its record stays
    assert (meta.status, meta.reason) == ("aborted", "runner_lost"), meta
    assert "of this host) is gone" in meta.detail, meta.detail
    assert c.latest_completed() == 4 and c.barrier(4).parent_epoch_id == 2
    oracle.assert_gold_matches_oracle(c, data, ["origin", "dest"], "gold_route_stats",
                                      until="2013-01-05")
    oracle.assert_gold_matches_oracle(c, data, ["carrier"], "gold_carrier_stats",
                                      until="2013-01-05")
