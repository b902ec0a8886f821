"""Jobs on a real Spark Connect server (pyspark's own, started by the runtime's launcher):
epochs through Connect equal an independent computation on local storage and on S3, the
server's executors write the state (the distributed path), and what a user gets wrong
(server down, a port that is not a Connect server, a job that needs the JVM) is one line
naming the endpoint, in seconds."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pytest

from bench.harness.airflow_standalone import free_port
from bench.harness.oracle import assert_gold_matches_oracle
from bench.harness.s3server import ACCESS_KEY, SECRET_KEY
from checkpointing import Coordinator, LocalStorage, plan_from_edges
from checkpointing.storage.s3 import S3Storage
from checkpointing.views.stats import epoch_stats
from spark_jobs.flights.landing import land
from spark_jobs.runtime.connect import SparkConnectError, check_versions
from tests.integration.test_spark_jobs import kill_mid_epoch_then_rerun
from tests.support.helpers import FLIGHTS

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
ROUTE, CARRIER = ["origin", "dest"], ["carrier"]


def run(args: list[str], timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env})


def run_epoch(storage: str, data: str, run_id: str, remote: str, *extra: str, **env: str):
    r = run(["spark_jobs.runtime.run_epoch", *FLIGHTS, "--storage", storage, "--data", data,
             "--run-id", run_id, "--remote", remote, *extra], **env)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


def test_epochs_through_connect_equal_independent_computation(spark_connect, tmp_path):
    """Two epochs through the server; the second run is started twice at once (a duplicated
    trigger): one driver runs it, the other stops with one line naming the holder of the
    epoch's lease (PROTOCOL 5.13, 1.11), and the published output equals the oracle."""
    data = LocalStorage(tmp_path / "data")
    land(data, [date(2013, 1, 1), date(2013, 1, 2)], malformed_rate=0.01, seed=5)
    storage, data_uri = f"file://{tmp_path}/ckpt", f"file://{tmp_path}/data"
    run_epoch(storage, data_uri, "day-2", spark_connect.url)
    land(data, [date(2013, 1, 3)], dims=False, seed=5)
    args = [sys.executable, "-m", "spark_jobs.runtime.run_epoch", *FLIGHTS, "--storage", storage,
            "--data", data_uri, "--run-id", "day-3", "--remote", spark_connect.url]
    drivers = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in drivers]
    refused = [err for rc, err in results if rc != 0]
    assert len(refused) == 1, results
    last = refused[0].strip().splitlines()[-1]
    assert last.startswith("run_epoch: error: epoch 2 is driven by ") or \
        last.startswith("run_epoch: error: epoch 2 was just taken by another driver"), \
        refused[0][-3000:]

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "flights_daily")
    assert c.latest_completed() == 2
    assert {h.attempt for h in c.completed_handles(2).values()} == {1}
    assert_gold_matches_oracle(c, data, ROUTE, "gold_route_stats")
    assert_gold_matches_oracle(c, data, CARRIER, "gold_carrier_stats")
    h2 = c.completed_handles(2)["ingest_flights"]
    # The server's executors wrote the new state into the attempt's own prefix of the
    # checkpoint storage (not a scratch directory of the client's), and the unchanged
    # days' partitions are the first epoch's files, referenced.
    new = [f for f in h2.files if "part=2013-01-03/" in f.name]
    assert new and all("/epochs/0000000002/state/ingest_flights/attempt-0001/spark/" in f.uri
                       for f in new)
    old = {f.name: f.uri for f in c.completed_handles(1)["ingest_flights"].files}
    carried = [f for f in h2.files if "part=2013-01-01/" in f.name]
    assert carried and all(old[f.name] == f.uri for f in carried)
    assert h2.metrics["partitions_rewritten"] == ["2013-01-03"]


def test_client_killed_mid_epoch_then_rerun_restores_without_double_counting(spark_connect,
                                                                          tmp_path):
    """SIGKILL of the client mid-epoch (its queries may still run on the server, writing
    into the killed attempt's own prefix), then the same run again: the next attempt
    restores, and the published tables equal the oracle (nothing counted twice)."""
    c = kill_mid_epoch_then_rerun(tmp_path, "--remote", spark_connect.url)
    attempts = {t.task_id: t.acked_attempt for t in epoch_stats(c, 1).tasks}
    assert 2 in attempts.values(), attempts  # some task ran again after the kill


def test_epoch_through_connect_on_s3(spark_connect, s3_server, s3_bucket):
    data = S3Storage(s3_bucket, "data", endpoint_url=s3_server.endpoint)
    land(data, [date(2013, 1, 1), date(2013, 1, 2)], seed=6)
    r = run_epoch(f"s3://{s3_bucket}/ckpt", f"s3://{s3_bucket}/data", "s3-day-2",
                  spark_connect.url, "--endpoint-url", s3_server.endpoint,
                  AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    assert SECRET_KEY not in r.stdout + r.stderr
    c = Coordinator(S3Storage(s3_bucket, "ckpt", endpoint_url=s3_server.endpoint),
                    "flights_daily")
    assert c.latest_completed() == 1
    assert_gold_matches_oracle(c, data, CARRIER, "gold_carrier_stats")
    assert_gold_matches_oracle(c, data, ROUTE, "gold_route_stats")


def one_task_epoch(tmp_path: Path, task: str) -> str:
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "connect_errors")
    c.begin_epoch(plan_from_edges({task: []}, set()), f"run-{task}")
    return f"file://{tmp_path}/ckpt"


def task_args(storage: str, job: str, task: str, remote: str) -> list[str]:
    return ["spark_jobs.runtime", "--job", job, "--storage", storage, "--pipeline",
            "connect_errors", "--epoch", "1", "--task", task, "--remote", remote]


def test_what_a_user_gets_wrong_is_one_line_naming_the_endpoint(spark_connect, s3_server,
                                                                 tmp_path):
    storage = one_task_epoch(tmp_path, "t")
    job = "bench.harness.connect_jobs:uses_spark_context"
    down = f"sc://127.0.0.1:{free_port()}"
    not_connect = s3_server.endpoint.replace("http://", "sc://")  # an HTTP server's port
    for remote, words in ((down, "is unreachable"),
                          (not_connect, "did not answer as a Spark Connect server")):
        t0 = time.monotonic()
        r = run(task_args(storage, job, "t", remote), timeout=120)
        assert r.returncode == 2 and time.monotonic() - t0 < 60, r.stderr[-2000:]
        line = r.stderr.strip().splitlines()[-1]
        assert words in line and remote in line, r.stderr[-2000:]
        assert "Traceback" not in r.stderr

    # A job that needs the JVM: the runtime says what Connect lacks and what to do.
    r = run(task_args(storage, job, "t", spark_connect.url), timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "sparkContext" in line and "DataFrame API only" in line, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_versions_refused_across_major_and_warned_across_minor(caplog):
    with pytest.raises(SparkConnectError, match=r"sc://h:1 runs Spark 3\.5\.1.*pyspark 4\.3\.0"):
        check_versions("4.3.0", "3.5.1", "sc://h:1/;token=secret")
    check_versions("4.3.0", "4.1.0", "sc://h:1/;token=secret")
    assert "4.1.0" in caplog.text and "secret" not in caplog.text
    check_versions("4.3.0", "4.3.1", "sc://h:1")


def test_the_readme_server_commands_start_report_and_stop(tmp_path):
    """`python -m spark_jobs.runtime.connect_server start|status|stop`, as the README shows
    them: start returns once the server listens, status says so, stop ends it."""
    port = str(free_port())
    r = run(["spark_jobs.runtime.connect_server", "start", "--port", port], timeout=300)
    try:
        assert r.returncode == 0 and f"listening on sc://127.0.0.1:{port}" in r.stdout, \
            r.stdout + r.stderr
        s = run(["spark_jobs.runtime.connect_server", "status", "--port", port])
        assert s.returncode == 0 and "running" in s.stdout, s.stdout
        busy = run(["spark_jobs.runtime.connect_server", "start", "--port", port])
        assert busy.returncode == 1 and f"port {port} is busy" in busy.stderr, busy.stderr
    finally:
        stop = run(["spark_jobs.runtime.connect_server", "stop", "--port", port])
    assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stdout + stop.stderr
    s = run(["spark_jobs.runtime.connect_server", "status", "--port", port])
    assert s.returncode == 1 and "not listening" in s.stdout


def test_a_port_taken_before_the_server_binds_it_is_not_mistaken_for_the_server():
    """`port=0` takes a free port; when another process listens there before the JVM
    binds it (what made a whole xdist worker's tests fail once: the launcher saw the port
    listening and took the squatter for its server), the launcher notices the port is not
    its server's and starts again on another."""
    import socket

    import spark_jobs.runtime.connect_server as cs

    with socket.socket() as squat:
        squat.bind(("127.0.0.1", 0))
        squat.listen()
        taken = squat.getsockname()[1]
        ports = iter([taken])
        real = cs.free_port
        cs.free_port = lambda host: next(ports, None) or real(host)
        try:
            server = cs.ConnectServer(port=0, driver_memory="512m").start()
        finally:
            cs.free_port = real
        try:
            assert server.port != taken
            assert cs._owns_port(server.proc.pid, server.port)
            assert not cs._owns_port(server.proc.pid, taken)
        finally:
            server.stop()


def test_a_session_on_a_server_it_owns_fails_in_seconds_when_the_server_dies(caplog):
    """The client's default retries ride out a restart for about ten minutes a request; on
    a server the caller started itself (a benchmark's), a crash ends the next request in
    seconds instead, and stopping the server names how it ended, with its log."""
    import signal

    import spark_jobs.runtime.connect_server as cs

    server = cs.ConnectServer(port=0, driver_memory="512m").start()
    spark = server.session("dies")
    try:
        assert spark.range(3).count() == 3
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(30)
        t = time.monotonic()
        with pytest.raises(Exception):  # noqa: B017 grpc's unavailable, as pyspark raises it
            spark.range(3).count()
        assert time.monotonic() - t < 60, "the client retried a dead server"
    finally:
        # no longer this process's active session: pyspark's Python UDFs read their
        # settings from the active one
        with contextlib.suppress(Exception):
            spark.stop()
        with caplog.at_level("WARNING", logger=cs.__name__):
            server.stop()
    assert any(f"exited ({-signal.SIGKILL})" in r.getMessage() for r in caplog.records)


def _slow_task(tmp_path: Path, remote: str, attempt: int, marks: Path
               ) -> subprocess.Popen:
    args = task_args(f"file://{tmp_path}/ckpt", "bench.harness.connect_jobs:slow_squares",
                     "squares", remote)
    return subprocess.Popen([sys.executable, "-m", *args, "--attempt", str(attempt)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "CKPT_TEST_MARKS": str(marks)})


def _parquet_rows(uris: list[str], value: str = "square") -> list[tuple[int, int]]:
    """The (id, ``value``) rows of parquet files, read with pyarrow (not Spark)."""
    import pyarrow.parquet as pq

    rows = []
    for uri in uris:
        t = pq.read_table(uri.removeprefix("file://"))
        rows += list(zip(t.column("id").to_pylist(), t.column(value).to_pylist(),
                         strict=True))
    return sorted(rows)


def _state_rows(handle) -> list[tuple[int, int]]:
    """The (id, square) rows of a handle's state files."""
    return _parquet_rows([f.uri for f in handle.files if f.name.endswith(".parquet")])


def test_killed_task_resumes_its_running_spark_action_instead_of_running_it_again(
        spark_connect, tmp_path):
    """Write resumption (PROTOCOL 5.17): attempt 1's slow write is SIGKILLed at about 80 %
    of its rows; attempt 2 reattaches to the server's still-running operation: every row
    was computed once (one marker each), the state holds exactly the oracle's rows, the
    counts observed by that one write reach attempt 2's handle, the handle says what it
    resumed, and the epoch its acknowledgement completed publishes the oracle's rows."""
    from bench.harness.connect_jobs import SLOW_ROWS
    from checkpointing import read_manifest

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "connect_errors")
    c.begin_epoch(plan_from_edges({"squares": []}, {"squares"}), "run-slow")
    marks = tmp_path / "marks"
    marks.mkdir()
    first = _slow_task(tmp_path, spark_connect.url, 1, marks)
    deadline = time.monotonic() + 240
    while len(os.listdir(marks)) < SLOW_ROWS * 8 // 10:
        assert first.poll() is None, first.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the slow action never got to 80 %"
        time.sleep(0.05)
    first.kill()
    first.wait()
    done_at_kill = len(os.listdir(marks))
    assert done_at_kill < SLOW_ROWS, "the action finished before the kill"

    second = _slow_task(tmp_path, spark_connect.url, 2, marks)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err[-4000:]
    assert "resumed state:squares from attempt 1" in err, err[-3000:]
    assert sorted(int(m.split("-")[0]) for m in os.listdir(marks)) == list(range(SLOW_ROWS))
    ack = c.read_ack(c.layout.attempt_object(1, "squares", 2, "ack"))
    oracle = [(i, i * i) for i in range(SLOW_ROWS)]
    assert _state_rows(ack.state_handle) == oracle
    assert ack.state_handle.row_counts == {"rows": SLOW_ROWS,
                                           "total": sum(s for _, s in oracle)}
    assert ack.state_handle.metrics["resumed"] == {"from_attempt": 1,
                                                  "actions": ["state:squares"]}
    # Published: the last acknowledgement completed the epoch (attempt 1 staged nothing).
    assert c.metadata(1).completed
    published = read_manifest(c.storage, c.layout).outputs["squares"]
    assert _parquet_rows([f.uri for f in published.files]) == oracle


def test_an_operation_the_server_no_longer_holds_runs_again(spark_connect, tmp_path):
    """The record of a killed attempt names an operation the server does not hold (its
    session was released): the next attempt runs the action again, and still acknowledges
    the oracle's rows."""
    from bench.harness.connect_jobs import SLOW_ROWS
    from checkpointing.protocol.operations import EngineOperation

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "connect_errors")
    c.begin_epoch(plan_from_edges({"squares": []}, set()), "run-gone")
    c.record_operation(1, EngineOperation(
        "squares", 1, "state:squares", "spark-connect", "0b6e4a9c-6f1d-4c55-9a4e-2f1c3d9b8e71",
        "6ba3a0fc-5ecc-49ff-ac81-79827450d110", "2013-01-01T00:00:00.000Z"))
    marks = tmp_path / "marks"
    marks.mkdir()
    second = _slow_task(tmp_path, spark_connect.url, 2, marks)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err[-4000:]
    assert "could not resume state:squares of attempt 1" in err, err[-3000:]
    assert len(os.listdir(marks)) == SLOW_ROWS  # computed by attempt 2, once
    ack = c.read_ack(c.layout.attempt_object(1, "squares", 2, "ack"))
    assert "resumed" not in ack.state_handle.metrics
    assert _state_rows(ack.state_handle) == [(i, i * i) for i in range(SLOW_ROWS)]


def test_a_task_unpersists_what_it_cached_and_leaves_other_sessions_caches(spark_connect,
                                                                           tmp_path):
    """Spark's cache manager is the server's: a task's end used to clear every cache on
    it (``catalog.clearCache``), other tasks' included, in a lock order that deadlocked a
    task filling a cached relation beside it. It now unpersists its own DataFrames only."""
    from pyspark.storagelevel import StorageLevel

    from spark_jobs.runtime import JobResult, run_task, spark_session

    mine = spark_session("cache-task", remote=spark_connect.url)
    other = spark_session("cache-other", remote=spark_connect.url)
    try:
        beside = other.range(50).selectExpr("id * 3 AS x").cache()
        assert beside.count() == 50  # another task's cached data, filled
        cached = []

        def job(run):
            df = run.spark.range(100).selectExpr("id * 7 AS y").persist()
            cached.append(df)
            return JobResult(row_counts={"rows": df.count()})

        c = Coordinator(LocalStorage(tmp_path / "ckpt"), "caches")
        c.begin_epoch(plan_from_edges({"t": []}, set()), "run-1")
        ack = run_task(job, c, 1, "t", 1, mine, "")
        assert ack.state_handle.row_counts == {"rows": 100}
        assert cached[0].storageLevel == StorageLevel.NONE  # the task's own: unpersisted
        assert beside.storageLevel != StorageLevel.NONE  # the other session's: kept
    finally:
        mine.stop()
        other.stop()


def test_a_spark_error_fails_the_task_with_a_line_without_where_data_lives(
        spark_connect, tmp_path, capsys):
    """Spark's errors name each file's full path: the operator fails the try with the
    error's type and first line with storage and data written <storage>, and logs the whole
    traceback so redacted for whoever debugs the job."""
    from airflow.sdk.exceptions import AirflowException
    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.operators.spark import CheckpointedSparkOperator

    storage = one_task_epoch(tmp_path, "t")
    (tmp_path / "data").mkdir()
    op = CheckpointedSparkOperator(
        task_id="t", job="bench.harness.connect_jobs:reads_a_missing_file",
        settings=CheckpointSettings(pipeline_id="connect_errors", storage=storage,
                                    data=f"file://{tmp_path}/data", spark_mode="connect"))
    capsys.readouterr()
    with pytest.raises(AirflowException) as failed:
        op._in_process(op.job_callable(), 1, 1, remote=spark_connect.url)
    line = str(failed.value)
    assert line.startswith("t: ") and "PATH_NOT_FOUND" in line, line
    assert "<storage>/raw/missing.parquet" in line and str(tmp_path) not in line, line
    # The operator's log (Airflow's structured logger writes it to the task's stream).
    out = capsys.readouterr()
    logged = (out.out + out.err)
    logged = logged[logged.index("t: the job failed"):]
    logged = logged[:logged.index("CheckpointedSparkOperator")]
    assert "Traceback" in logged and "reads_a_missing_file" in logged, logged
    assert "<storage>/raw/missing.parquet" in logged and str(tmp_path) not in logged, logged


def test_a_result_a_state_handle_cannot_hold_fails_the_task_in_one_line_at_the_job(
        spark_connect, tmp_path):
    """A TableVersion in a job's metrics: the try fails, not retried (the same code fails
    the same way), with one line naming the key and its type, before any acknowledgement;
    the runtime's command line says the same line and exits 2, without a traceback."""
    from airflow.sdk.exceptions import AirflowFailException
    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.operators.spark import CheckpointedSparkOperator

    storage = one_task_epoch(tmp_path, "t")
    op = CheckpointedSparkOperator(
        task_id="t", job="bench.harness.connect_jobs:returns_a_table_version_metric",
        settings=CheckpointSettings(pipeline_id="connect_errors", storage=storage,
                                    spark_mode="connect"))
    with pytest.raises(AirflowFailException) as failed:
        op._in_process(op.job_callable(), 1, 1, remote=spark_connect.url)
    line = str(failed.value)
    assert line == ("t: task t: the job's result metrics['source']['end'] is a TableVersion, "
                    "not a JSON value (str, int, float, bool, None, list, or dict with str "
                    "keys): convert it, e.g. str(v) or a dict of its fields"), line
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "connect_errors")
    assert c.status(1) == "pending" and c.acknowledged_handle(1, "t") is None
    r = run(task_args(storage, "bench.harness.connect_jobs:returns_a_table_version_metric", "t",
                      spark_connect.url) + ["--attempt", "2"], timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].endswith(
        "metrics['source']['end'] is a TableVersion, not a JSON value (str, int, float, "
        "bool, None, list, or dict with str keys): convert it, e.g. str(v) or a dict of its "
        "fields"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def _two_writes_at_once(spark, marks: Path, rows: int, on_start=None):
    """A job writing two slow states (one Spark task each, a Python UDF sleeping a second a
    row and leaving a marker named for its write) at once through ``JobRun.concurrently``;
    each write caches its frame first."""
    from pyspark.sql import functions as F

    from spark_jobs.runtime import JobResult

    @F.udf("long")
    def slow(x: int, factor: int) -> int:
        import time as _time
        import uuid as _uuid

        _time.sleep(1.0)
        open(os.path.join(str(marks), f"{factor}-{x}-{_uuid.uuid4().hex}"), "w").close()
        return x * factor

    cached: list = []

    def job(run):
        def write(name: str, factor: int):
            def action():
                df = spark.range(0, rows, 1, 1).select(
                    F.col("id"), slow("id", F.lit(factor)).alias("v")).cache()
                cached.append(df)
                return run.write_state(df, name)
            return action

        if on_start is not None:
            on_start(run)
        a, b = run.concurrently(write("a", 2), write("b", 3))
        return JobResult(row_counts={"a": len(a), "b": len(b)})

    return job, cached


def test_writes_run_at_once_are_each_an_operation_of_the_attempt(spark_connect, tmp_path):
    """``JobRun.concurrently``: two state writes overlap (each one Spark task of four
    one-second rows: each write's first row is computed before the other's last), each runs
    under an operation record of its own (PROTOCOL 5.17), both reach the snapshot (rows
    equal what each wrote), the Spark write time counts the overlap once (at most the
    task's wall time), and what each cached is
    unpersisted at the end of the task."""
    from pyspark.storagelevel import StorageLevel

    from spark_jobs.runtime import run_task, spark_session

    spark = spark_session("two-writes", remote=spark_connect.url)
    marks = tmp_path / "marks"
    marks.mkdir()
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "two_writes")
    c.begin_epoch(plan_from_edges({"t": []}, set()), "run-1")
    recorded = []
    record = c.record_operation
    c.record_operation = lambda epoch, op: (recorded.append(op), record(epoch, op))[1]
    try:
        job, cached = _two_writes_at_once(spark, marks, 4)
        t0 = time.monotonic()
        ack = run_task(job, c, 1, "t", 1, spark, "")
        wall = time.monotonic() - t0
        assert [df.storageLevel for df in cached] == [StorageLevel.NONE] * 2
    finally:
        spark.stop()
    h = ack.state_handle
    assert h.row_counts == {"a": 1, "b": 1}
    assert sorted(op.action for op in recorded) == ["state:a", "state:b"]
    assert len({op.operation_id for op in recorded}) == 2
    rows = {n: _parquet_rows([f.uri for f in h.files if f.name.startswith(f"{n}/")
                              and f.name.endswith(".parquet")], "v") for n in ("a", "b")}
    assert rows == {"a": [(i, 2 * i) for i in range(4)], "b": [(i, 3 * i) for i in range(4)]}
    stamps = {f: [p.stat().st_mtime for p in marks.glob(f"{f}-*")] for f in (2, 3)}
    assert [len(stamps[2]), len(stamps[3])] == [4, 4]
    assert min(stamps[2]) < max(stamps[3]) and min(stamps[3]) < max(stamps[2]), stamps
    assert h.timings["sync_ms"] <= wall * 1000, (h.timings, wall)


def test_an_interrupt_of_the_attempt_stops_every_write_it_runs_at_once(spark_connect,
                                                                       tmp_path):
    """What Airflow's kill of a try does (``interrupt_attempt`` by the attempt's tag, from
    another thread) reaches both writes a job runs at once: the two operations it
    interrupts are the two the attempt recorded, the task fails, and most rows were never
    computed."""
    import threading

    from spark_jobs.runtime import run_task, spark_session
    from spark_jobs.runtime.job_run import interrupt_attempt, job_tag

    spark = spark_session("two-writes-stopped", remote=spark_connect.url)
    marks = tmp_path / "marks"
    marks.mkdir()
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "two_writes")
    c.begin_epoch(plan_from_edges({"t": []}, set()), "run-1")
    recorded, interrupted = [], []
    record = c.record_operation
    c.record_operation = lambda epoch, op: (recorded.append(op), record(epoch, op))[1]

    def stop_when_both_run():
        deadline = time.monotonic() + 120
        while len(recorded) < 2 or len(os.listdir(marks)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        interrupted.extend(interrupt_attempt(spark, job_tag("two_writes", 1, "t", 1)))

    stopper = threading.Thread(target=stop_when_both_run)
    job, _ = _two_writes_at_once(spark, marks, 30, on_start=lambda run: stopper.start())
    try:
        with pytest.raises(Exception, match="(?i)cancel|interrupt"):
            run_task(job, c, 1, "t", 1, spark, "")
        stopper.join(timeout=60)
    finally:
        spark.stop()
    assert sorted(interrupted) == sorted(op.operation_id for op in recorded)
    assert len(interrupted) == 2
    assert len(os.listdir(marks)) < 30


def test_rows_are_counted_from_the_files_when_a_write_s_observation_comes_back_empty(
        spark_connect, tmp_path, monkeypatch):
    """A Spark Connect 4.1 server sends an observation not ready within 100 ms as an empty
    one (SPARK-54279; a loaded machine's retry failed on it). Every write's observation
    made empty here: each write still returns the rows it wrote, counted from its files (a
    partitioned table, a merge's change rows with its deleted keys, no row at all), and the
    flights pipeline, whose jobs observe their new days and per-bucket counts, publishes
    figures equal to the oracle's over two epochs."""
    from pyspark.sql.connect.observation import Observation

    from checkpointing.tables.spec import TableSpec
    from spark_jobs.runtime import JobResult, run_task, spark_session

    monkeypatch.setattr(Observation, "get", property(lambda self: {}))
    spark = spark_session("empty-observation", remote=spark_connect.url)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "counted")
    c.begin_epoch(plan_from_edges({"t": []}, set()), "run-1")
    counted: dict[str, int] = {}

    def table(name: str, **spec) -> TableSpec:
        return TableSpec.from_json({"location": f"file://{tmp_path}/{name}", "format": "delta",
                                    **spec})

    def job(run):
        counted["plain"] = run.write_output(spark.range(0, 7), "plain")
        counted["parts"] = run.write_table(spark.range(0, 5).selectExpr("id", "id % 2 AS p"),
                                           "parts", table("parts", mode="overwrite",
                                                          partition_by=["p"]))
        counted["merged"] = run.write_table(
            spark.range(0, 3), "merged", table("merged", mode="merge", keys=["id"]),
            deleted=spark.range(10, 12))
        counted["none"] = run.write_table(spark.range(0, 0), "none",
                                          table("none", mode="overwrite"))
        return JobResult()

    from spark_jobs.flights.pipeline import PIPELINE
    from spark_jobs.runtime import drive_epoch

    data = LocalStorage(tmp_path / "data")
    flights = Coordinator(LocalStorage(tmp_path / "flights"), "flights_daily")
    try:
        run_task(job, c, 1, "t", 1, spark, "")
        land(data, [date(2013, 1, 1), date(2013, 1, 2)], malformed_rate=0.01, seed=5)
        drive_epoch(PIPELINE, flights, spark, f"file://{tmp_path}/data", "day-2")
        land(data, [date(2013, 1, 3)], dims=False, seed=5)
        drive_epoch(PIPELINE, flights, spark, f"file://{tmp_path}/data", "day-3")
    finally:
        spark.stop()
    assert counted == {"plain": 7, "parts": 5, "merged": 5, "none": 0}
    assert flights.latest_completed() == 2
    assert_gold_matches_oracle(flights, data, ROUTE, "gold_route_stats")
    assert_gold_matches_oracle(flights, data, CARRIER, "gold_carrier_stats")
