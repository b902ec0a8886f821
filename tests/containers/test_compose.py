"""The Docker image and the compose deployment, built and run for real (podman here, the
docker CLI elsewhere): the image built from the wheel on the local bases, every service of
docker/docker-compose.yml started in its container and healthy, daily epochs of
flights_daily through the Celery workers, a worker container killed mid-task and the run
restored on the other, the published tables equal to the pandas oracle; `down -v` leaves
no container, volume or network. `make test-containers` (minutes: not in `make test`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.drills import DRILL_ENV, VICTIM_TASK, Drills
from scripts.compose import Compose

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(5400)]


def _sh(*cmd: str, timeout: float = 3600) -> str:
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (cmd, r.stderr[-3000:], r.stdout[-2000:])
    return r.stdout


@pytest.fixture(scope="module")
def deployment():
    _sh("scripts/container_images.sh", "bases")
    _sh("scripts/container_images.sh", "build")
    c = Compose(local=True, airflow_env=DRILL_ENV)
    c.down()  # a previous run's leftovers
    try:
        c.up()
        yield c
    finally:
        left = c.down()
        assert left == [], left


def test_the_image_is_what_a_platform_team_expects(deployment):
    """Non-root, no build tool or cache in the final stage, the provider from the wheel
    with its extras, the S3A jars where the runtime looks."""
    run = ("podman", "run", "--rm", "dag-checkpoints:local")
    assert _sh(*run, "id", "-u").strip() == "50000"
    assert _sh(*run, "sh", "-c", "command -v mvn gcc javac || true").strip() == ""
    assert _sh(*run, "sh", "-c", "ls /root/.cache /root/.m2 /dist 2>/dev/null || true") == ""
    out = _sh(*run, "python", "-c",
              "import importlib.metadata as m, os, dag_checkpoints, openlineage.client;"
              "print(m.version('dag-checkpoints'));"
              "print(dag_checkpoints.__file__);"
              "print(sorted(os.listdir(os.environ['CKPT_SPARK_JARS_DIR'])))")
    version, where, jars = out.splitlines()
    assert "site-packages" in where and version
    assert "hadoop-aws" in jars and "bundle-" in jars


def test_daily_epochs_and_a_killed_worker_container(deployment):
    d = Drills(deployment)
    for _ in range(2):
        d.clean_epoch()
    assert d.coord.latest_completed() == 2

    # A Celery worker's container killed while it runs a Spark task.
    run_id, logical = d.trigger_next()
    ti = d.victim_running(run_id, after=5)
    by_host = {c["hostname"]: n for n, c in deployment.containers().items()
               if c["service"] == "airflow-worker"}
    victim = by_host[ti["hostname"]]
    deployment.kill(victim)
    state = d.finish(run_id, logical)
    tis = d.af.task_instances(run_id)
    assert state == "success", {t: (x["state"], x["try_number"]) for t, x in tis.items()}
    assert tis[VICTIM_TASK]["try_number"] >= 2
    assert by_host.get(tis[VICTIM_TASK]["hostname"]) != victim
    handle = d._handle(run_id, VICTIM_TASK)
    assert handle.restored_from == {"epoch_id": 2}, handle.restored_from
    deployment.start(victim)

    d.clean_epoch()  # and the deployment goes on
    assert d.coord.latest_completed() == 4 and d.completed_once(run_id)
    verdict, lost, dup = d.check()
    assert (verdict, lost, dup) == ("ok", 0, 0)


def test_every_service_runs_in_its_container_healthy(deployment):
    """(The module's teardown asserts that `down -v` leaves nothing.)"""
    cs = deployment.containers()
    services = {c["service"] for c in cs.values()}
    assert {"postgres", "redis", "minio", "spark-master", "spark-worker", "spark-connect",
            "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "airflow-worker"} <= services
    running = [n for n, c in cs.items() if c["state"] == "running"]
    assert len([n for n in running if cs[n]["service"] == "airflow-worker"]) == 2
    assert all(deployment.healthy(n, cs[n]) for n in running), cs
