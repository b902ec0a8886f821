"""The deployment topology for real: scripts/cluster.py brings up the compose file's services
as processes (PostgreSQL, Redis, MinIO, Spark master + worker + Connect server, Airflow's
api-server, scheduler, dag-processor, triggerer and two Celery workers under
CeleryExecutor); two daily epochs of flights_daily run through it, a Celery worker is
SIGKILLed mid-task in the second; the published tables equal the pandas oracle, and `down`
leaves no process behind. The full drills are `make drills` (bench/drills.py), which also
run a clean epoch after the kill."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from bench.drills import DRILL_ENV, Drills, Processes
from scripts.cluster import _pg_dir, down, up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
#: The drills' settings, with the lost task noticed sooner (30 s without a heartbeat, the
#: check every 10 s: Airflow's supervisor heartbeats every 5 s) to keep `make test` short,
#: and unchanged DAG files not parsed again every 30 s (bench/harness/airflow_env.py).
TEST_ENV = {**DRILL_ENV, "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600"}


def _processes_mentioning(home: Path) -> list[str]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(home) in cmd:
                found.append(f"{d.name}: {cmd[:200]}")
    return found


def celery_results(cluster) -> dict[str, int]:
    """Task results per status in Celery's database result backend (PostgreSQL)."""
    import sqlalchemy as sa

    engine = sa.create_engine(cluster.airflow_env()["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    try:
        with engine.connect() as conn:
            return dict(conn.execute(sa.text(
                "select status, count(*) from celery_taskmeta group by status")).all())
    finally:
        engine.dispose()


def test_two_epochs_through_celery_with_a_worker_killed(tmp_path):
    home = tmp_path / "cluster"
    cluster = up(home, free_ports=True, extra_env=TEST_ENV, log=lambda *a, **k: None)
    try:
        d = Drills(Processes(cluster))
        first = d.clean_epoch()
        # The tasks went through Celery: each has a result in the backend's table, except
        # the epoch's watchdog, which the triggerer ends once the epoch is decided
        # (protocol 1.7): it never resumes on a worker.
        tis = d.af.task_instances(first)
        on_workers = [t for t in tis if t != "checkpoint_timeout"]
        assert tis["checkpoint_timeout"]["state"] == "success"
        # The worker stores a task's result after Airflow saw the task end: wait for it.
        deadline = time.monotonic() + 30
        while celery_results(cluster).get("SUCCESS", 0) < len(on_workers) and \
                time.monotonic() < deadline:
            time.sleep(1)
        assert celery_results(cluster).get("SUCCESS", 0) >= len(on_workers)

        res = d.worker_kill()
        (outcome,) = res.outcomes
        killed = outcome.split("killed:")[1].split("->")[0]
        retried_on = outcome.split("retried_on:")[1].split(":")[0]
        assert killed.startswith("airflow-worker-") and retried_on.startswith("airflow-worker-")
        assert killed != retried_on, outcome
        # The killed run's epoch is the last; a run whose task ended before the kill (the
        # drill then kills the next run sooner) completed the one before it.
        assert f"restored_from={{'epoch_id': {d.triggered - 1}}}" in outcome, outcome
        assert outcome.endswith("->success:ok"), (outcome, res.notes)
        assert res.rows_lost == res.rows_duplicated == 0

        assert d.coord.latest_completed() == d.triggered
        verdict, lost, dup = d.check()  # every day so far against the pandas oracle
        assert (verdict, lost, dup) == ("ok", 0, 0)
        assert d.published_until == d.next_logical - timedelta(days=1)
    finally:
        left = down(home, log=lambda *a, **k: None, volumes=True)
    assert left == []
    assert _processes_mentioning(home) == []
    assert not _pg_dir(home).exists() and not (home / "minio").exists()  # down --volumes
