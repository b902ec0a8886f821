"""One job submitted through spark-submit to a real standalone master and worker."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from dag_checkpoints import CheckpointHook

from checkpointing import Coordinator, LocalStorage
from spark_jobs.flights.landing import land
from spark_jobs.flights.pipeline import PLAN
from spark_jobs.runtime.package import build_jobs_zip
from tests.support.spark_cluster import SPARK_HOME, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One master and worker for the module: a cluster outlives the applications on it."""
    c = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


def test_ingest_via_spark_submit_on_standalone_cluster(cluster, tmp_path):
    from datetime import date

    data = LocalStorage(tmp_path / "data")
    rep = land(data, [date(2013, 1, 1), date(2013, 1, 2)], malformed_rate=0.01, seed=4,
               weather=False)
    coord = Coordinator(LocalStorage(tmp_path / "ckpt"), "flights_daily")
    epoch = coord.begin_epoch(PLAN, "scheduled__2013-01-02").epoch_id
    # A user's own application file: two lines calling the runtime's entry point.
    app = tmp_path / "my_job.py"
    app.write_text("from spark_jobs.runtime import main\n"
                   "from spark_jobs.flights.ingest_flights import ingest_flights\n"
                   "raise SystemExit(main(ingest_flights))\n")
    jobs_zip = build_jobs_zip(tmp_path / "ckpt_jobs.zip",
                              ("spark_jobs.flights.ingest_flights:ingest_flights",))
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONPATH": ""}  # the job code must come from --py-files, as on a real cluster
    cmd = [str(SPARK_HOME / "bin/spark-submit"), "--master", cluster.master_url,
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=1g",
           "--conf", "spark.sql.shuffle.partitions=4",
           "--py-files", str(jobs_zip), str(app), "--task", "ingest_flights",
           "--storage", f"file://{tmp_path}/ckpt", "--pipeline", "flights_daily",
           "--data", f"file://{tmp_path}/data", "--epoch", str(epoch), "--attempt", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert r.returncode == 0, r.stderr[-3000:]
    ack = coord.register_attempt(epoch, "ingest_flights", 2).existing
    assert ack is not None and ack.attempt == 1
    counts = ack.state_handle.row_counts
    bad = sum(rep.malformed_by_file.values())
    assert counts["rows_quarantined"] == bad
    assert counts["rows_added"] == rep.flight_rows - bad
    apps = cluster.state()
    assert any(a["name"] == "flights_daily.ingest_flights" for a in apps["completedapps"])


def test_dag_in_submit_mode_runs_every_job_on_the_cluster(cluster, tmp_path):
    """flights_daily under `airflow dags test` with CKPT_SPARK_MODE=submit: every job goes
    through SparkSubmitOperator to the master named by the Airflow connection."""
    import json
    from collections import Counter
    from datetime import date

    from bench.harness import oracle
    from bench.harness.airflow_env import airflow, airflow_env, migrate
    from checkpointing import read_manifest

    data = LocalStorage(tmp_path / "data")
    land(data, [date(2013, 1, 1)], malformed_rate=0.01, seed=5)
    temp = tmp_path / "worker-tmp"  # the Airflow worker's temporary directory
    temp.mkdir()
    env = airflow_env(
        tmp_path / "airflow", TMPDIR=str(temp), CKPT_STORAGE=f"file://{tmp_path}/ckpt",
        CKPT_DATA=f"file://{tmp_path}/data", CKPT_SPARK_MODE="submit",
        CKPT_SPARK_CONN_ID="spark_cluster", FLIGHTS_RETRIES="0",
        CKPT_SPARK_CONF="spark.sql.shuffle.partitions=4,spark.executor.memory=1g",
        AIRFLOW_CONN_SPARK_CLUSTER=json.dumps({"conn_type": "spark",
                                               "host": cluster.master_url}))
    migrate(env)
    before = Counter(a["name"] for a in cluster.state()["completedapps"])
    r = airflow(env, "dags", "test", "flights_daily", "2013-01-02")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "flights_daily")
    assert c.latest_completed() == 1 and read_manifest(c.storage, c.layout).epoch_id == 1
    # This run's applications: the cluster is shared with the module's other test.
    apps = Counter(a["name"] for a in cluster.state()["completedapps"]) - before
    assert set(apps) >= {f"flights_daily.{j}" for j in PLAN}, apps
    oracle.assert_gold_matches_oracle(c, data, ["carrier"], "gold_carrier_stats")
    # Each submission's jobs zip went with it: a worker keeps no directory per task.
    assert not list(temp.glob("ckpt-submit-*")), sorted(temp.iterdir())


def test_a_failed_submit_fails_the_task_with_a_line_without_where_data_lives(
        cluster, tmp_path, monkeypatch, capsys):
    """The provider's error for a failed spark-submit is its whole command (--storage and
    --data) and the output's last lines: the task fails with one line naming neither, and
    the message is logged with both written <storage>."""
    import json

    from airflow.sdk.exceptions import AirflowException
    from dag_checkpoints.operators.spark import CheckpointedSparkOperator
    from dag_checkpoints.shared.settings import CheckpointSettings

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(
        {"conn_type": "spark", "host": cluster.master_url}))
    temp = tmp_path / "worker-tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    settings = CheckpointSettings(
        pipeline_id="flights_daily", storage=f"file://{tmp_path}/ckpt",
        data=f"file://{tmp_path}/data", spark_mode="submit", spark_conn_id="spark_cluster",
        spark_conf=(("spark.executor.memory", "1g"),))
    epoch = CheckpointHook(settings).get_coordinator().begin_epoch(PLAN, "manual__stray").epoch_id
    # A task the epoch's plan does not have: its driver's acknowledgement is refused.
    op = CheckpointedSparkOperator(task_id="stray", settings=settings,
                                   job="spark_jobs.flights.ingest_flights:ingest_flights")
    with pytest.raises(AirflowException) as failed:
        op._submit(epoch, 1)
    line = str(failed.value)
    assert line.startswith("stray: spark-submit failed (exit code ") and \
        line.endswith("); its output is in the task log"), line
    logged = capsys.readouterr()
    logged = logged.out + logged.err
    assert "stray: spark-submit failed: Cannot execute:" in logged
    assert "--storage <storage> " in logged and "--data <storage> " in logged
    assert f"{tmp_path}/ckpt" not in logged.split("spark-submit failed:")[1]
    assert not list(temp.glob("ckpt-submit-*"))  # a failed submission leaves none either
