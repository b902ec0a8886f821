"""Small parts of the Airflow plugin that need no running Airflow."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_unreachable_spark_master_is_named():
    import socket

    import pytest
    from airflow.sdk.exceptions import AirflowException
    from dag_checkpoints.operators.spark import check_master_reachable

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(AirflowException, match=f"Spark master spark://127.0.0.1:{port} is "
                                               "unreachable"):
        check_master_reachable(f"spark://127.0.0.1:{port}", timeout=1)
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        check_master_reachable(f"spark://127.0.0.1:{port},127.0.0.1:{live.getsockname()[1]}")
    check_master_reachable("local[2]")  # nothing to probe


def test_settings_round_trip_without_secrets(monkeypatch):
    """Settings built from a deployment's environment, where secrets sit beside them, carry
    connection ids only: nothing secret reaches what Airflow stores (callback kwargs,
    trigger kwargs)."""
    from dag_checkpoints import AlertSettings, CheckpointSettings
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    secrets = {"AWS_SECRET_ACCESS_KEY": "aws-s3cr3t-9f1",
               "AWS_SESSION_TOKEN": "tok-77e2",
               "AIRFLOW_CONN_CKPT_SMTP": "smtp://mailer:pw-5c3a@mail.example.com:25",
               "AIRFLOW_CONN_CKPT_WEBHOOK": "https://hooks.example.com/T0/B0/xoxb-hook-secret"}
    for k, v in {**secrets, "CKPT_STORAGE": "s3://b/p", "CKPT_ALERT_SMTP_CONN": "ckpt_smtp",
                 "CKPT_ALERT_WEBHOOK_CONN": "ckpt_webhook",
                 "CKPT_ALERT_EMAIL": "ops@example.com"}.items():
        monkeypatch.setenv(k, v)
    import json

    from_env = CheckpointSettings("flights_daily")
    stored = json.dumps([from_env.to_kwargs(),
                         EpochDeadlineTrigger(from_env.to_kwargs(), 1, "x").serialize()[1]])
    assert from_env.alerts.smtp_conn_id == "ckpt_smtp" and "ckpt_webhook" in stored
    for secret in ("aws-s3cr3t-9f1", "tok-77e2", "pw-5c3a", "xoxb-hook-secret"):
        assert secret not in stored

    from checkpointing import CheckpointConfig

    s = CheckpointSettings("flights_daily", storage="s3://b/p", data="s3://d/",
                           endpoint_url="http://127.0.0.1:9000", aws_conn_id="aws_ckpt",
                           config=CheckpointConfig(timeout_seconds=60, retained_epochs=2),
                           spark_mode="submit", spark_conn_id="spark_cluster",
                           alerts=AlertSettings("hook", "/a", ("ops@example.com",), "smtp",
                                                "ckpt@example.com"))
    d = s.to_kwargs()
    assert CheckpointSettings.from_kwargs(d) == s
    import json

    text = json.dumps(d)  # what a Deadline Alert stores in Airflow's database
    assert "secret" not in text.lower() and "password" not in text.lower()

    # A credential in spark_conf: only the tasks that start Spark (the DAG's own settings)
    # have it; what Airflow stores (serialized settings, trigger and callback kwargs, and
    # the lineage events that show them) does not.
    from dag_checkpoints.timeouts import deadline_alert

    spark_secret = "s3a-k3y-0aa1"
    with_conf = CheckpointSettings("flights_daily", storage="s3://b/p", spark_mode="connect",
                                   spark_conf=(("spark.hadoop.fs.s3a.secret.key",
                                                spark_secret),))
    assert spark_secret not in json.dumps(with_conf.to_kwargs())
    alert = deadline_alert(with_conf)
    assert alert.callback.kwargs["checkpoint"]["pipeline_id"] == "flights_daily"
    assert spark_secret not in json.dumps(alert.callback.kwargs, default=str)


def test_bad_spark_mode_is_refused():
    import pytest
    from dag_checkpoints import CheckpointSettings

    with pytest.raises(ValueError, match="spark_mode"):
        CheckpointSettings("p", spark_mode="yarn-ish")


def test_checkpoint_conf_of_a_run():
    from dag_checkpoints.runconf import checkpoint_conf

    assert checkpoint_conf(None) == {} and checkpoint_conf({"other": 1}) == {}
    assert checkpoint_conf({"checkpoint": {"lineage": "bf-1"}}) == {"lineage": "bf-1"}


def test_checkpointing_is_disabled_only_by_an_explicit_false():
    from types import SimpleNamespace

    from dag_checkpoints.runconf import checkpointing_enabled

    def ctx(conf):
        return {"dag_run": SimpleNamespace(conf=conf)}

    assert checkpointing_enabled({}) and checkpointing_enabled(ctx(None))
    assert checkpointing_enabled(ctx({"checkpoint": {"enabled": True}}))
    assert checkpointing_enabled(ctx({"checkpoint": {"enabled": "false"}}))  # not a bool
    assert not checkpointing_enabled(ctx({"checkpoint": {"enabled": False}}))


def test_an_unchecked_run_writes_only_its_scratch_and_clears_earlier_ones(tmp_path):
    """Runs with checkpointing disabled keep their files under <pipeline>/unchecked/<run>/;
    the next such run's begin deletes the earlier runs' and nothing else."""
    from checkpointing import Coordinator, LocalStorage
    from checkpointing.state.unchecked_runs import UncheckedLayout, run_key

    st = LocalStorage(tmp_path)
    old, new = UncheckedLayout("p", run=run_key("r1")), UncheckedLayout("p", run=run_key("r2"))
    assert old.state_prefix(1, "t", 1) == f"p/unchecked/{run_key('r1')}/state/t/"
    assert old.staging_prefix(9, "t", 3) == f"p/unchecked/{run_key('r1')}/staging/t/"
    for key in (old.state_prefix(1, "t", 1) + "a.parquet", new.state_prefix(1, "t", 1) + "b",
                "p/counter.json", "p/epochs/0000000001/barrier.json", "q/unchecked/x/y"):
        st.write(key, b"x")
    assert Coordinator(st, "p").unchecked_run("r2").clear_earlier_runs() == 1
    left = sorted(o.key for o in st.list(""))
    assert left == sorted([new.state_prefix(1, "t", 1) + "b", "p/counter.json",
                           "p/epochs/0000000001/barrier.json", "q/unchecked/x/y"])


def test_blank_or_padded_storage_is_refused_with_one_line(tmp_path, monkeypatch):
    """A blank CKPT_STORAGE once made the api-server create a directory named ' '."""
    import pytest
    from dag_checkpoints import CheckpointSettings

    from checkpointing import open_storage
    from checkpointing.errors import StorageError

    monkeypatch.chdir(tmp_path)
    for bad in (" ", "", "\t", " file:///x"):
        with pytest.raises(StorageError, match="bad storage URI"):
            open_storage(bad)
    with pytest.raises(ValueError, match="surrounding white space"):
        CheckpointSettings("p", storage=" ")
    with pytest.raises(ValueError, match="no checkpoint storage configured"):
        CheckpointSettings("p", storage="").coordinator()
    assert list(tmp_path.iterdir()) == []  # nothing created in the working directory


def test_racing_announcers_deliver_an_alert_once(tmp_path):
    """The watchdog, the Deadline Alert's callback and a begin step may all announce one
    abort: the one whose alert record lands delivers, the others stay silent."""
    import threading

    from dag_checkpoints.notifications import AlertSettings, announce

    from checkpointing import CheckpointConfig, Coordinator, LocalStorage
    from tests.helpers import DIAMOND, FakeClock, race

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


def test_airflow_api_asks_again_when_airflow_is_unavailable():
    """Airflow answers 503 while SQLite is locked ("Database is locked"): the call asks
    again (twice here) and gets the answer; a 503 that lasts is Airflow's error, once."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from dag_checkpoints.airflow_api import AirflowApi, AirflowApiError

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            seen.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            locked = self.path == "/api/v2/locked" or len(seen) <= 2
            body = json.dumps({"detail": "Database is locked"} if locked else {"id": 7})
            self.send_response(503 if locked else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
    try:
        assert api.call("POST", "/api/v2/backfills", {}) == {"id": 7}
        assert len(seen) == 3
        seen.clear()
        with pytest.raises(AirflowApiError, match="Database is locked") as err:
            api.call("POST", "/api/v2/locked", {})
        assert err.value.status == 503 and len(seen) == 4  # the first try and 3 more
    finally:
        server.shutdown()


@pytest.mark.parametrize(("airflow", "ours"), [(400, 409), (409, 409), (401, 401), (403, 403),
                                               (503, 503), (500, 502), (504, 502)])
def test_airflow_refusals_of_a_backfill_keep_their_kind(airflow, ours):
    """Airflow refusing the range is a conflict; its own failure (500) is not one: the
    request may be fine, so the answer says the gateway failed."""
    from dag_checkpoints.airflow_api import AirflowApiError
    from dag_checkpoints.backfill import _status

    assert _status(AirflowApiError("no", airflow)) == ours


def test_work_around_for_clearing_runs_with_a_queued_at_deadline():
    """apache/airflow#70368: the installed Airflow hands the stored JSON interval of a
    Deadline Alert to ``timedelta`` when a run is cleared (a 500 in the UI and for a
    backfill over existing runs). The work-around is applied while the defect is there,
    and decodes what Airflow stores."""
    from datetime import timedelta

    from airflow.models import taskinstance
    from airflow.sdk.serde import serialize
    from dag_checkpoints import airflow_fixes

    stored = serialize(timedelta(seconds=3600))
    assert isinstance(stored, dict)  # what 3.3 keeps in deadline_alert.interval
    with pytest.raises(TypeError):
        timedelta(seconds=stored)  # the defect itself
    assert airflow_fixes.stored_interval(stored) == timedelta(hours=1)
    assert airflow_fixes.stored_interval(90.0) == timedelta(seconds=90)
    assert airflow_fixes.apply() == ["apache/airflow#70368"]
    assert taskinstance._recalculate_dagrun_queued_at_deadlines.ckpt_work_around
    assert airflow_fixes.apply() == ["apache/airflow#70368"]  # once, idempotent


def test_watchdog_reads_the_decision_while_the_commit_step_runs(tmp_path):
    """The run ends only when its watchdog does: while Airflow shows the commit step
    running, the trigger reads storage every 0.2 s instead of its ordinary poll (30 s
    here), so it ends with the epoch's decision, not one poll later."""
    import asyncio
    import threading

    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    from checkpointing import Coordinator
    from checkpointing.storage import LocalStorage
    from tests.helpers import DIAMOND, ack_task

    settings = CheckpointSettings("p", storage=f"file://{tmp_path}/ckpt")
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    b = c.begin_epoch(DIAMOND, "r")
    for task, tp in DIAMOND.items():
        ack_task(c, b.epoch_id, task, files={"state": task.encode()},
                 outputs={"gold": b"g"} if tp.publishes else None, tmp=tmp_path)
    trigger = EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id, b.deadline, 30.0,
                                   "d", "r", "checkpoint_commit")
    asked: list[str] = []

    async def running(wait: float) -> str:  # noqa: ARG001
        asked.append("running")
        return "running"

    trigger._commit_state = running  # Airflow's answer: the commit step is running

    async def first_event():
        gen = trigger.run()
        return await asyncio.wait_for(gen.__anext__(), timeout=10)

    # The commit step decides 0.5 s into the watch (after the trigger's first read).
    threading.Timer(0.5, lambda: c.complete(b.epoch_id)).start()
    from airflow.triggers.base import TaskSuccessEvent

    event = asyncio.run(first_event())
    assert isinstance(event, TaskSuccessEvent)
    assert len(asked) >= 2  # it kept asking Airflow at the committing pace


def _open_epoch(root: Path, **config: float) -> tuple:
    """(settings, coordinator, barrier): pipeline ``p`` checkpointed under ``root`` with
    ``CheckpointConfig(**config)``, and an open epoch of the diamond DAG for run ``r``."""
    from dag_checkpoints import CheckpointSettings

    from checkpointing import CheckpointConfig, Coordinator
    from checkpointing.storage import LocalStorage
    from tests.helpers import DIAMOND

    settings = CheckpointSettings("p", storage=f"file://{root}",
                                  config=CheckpointConfig(**config))
    c = Coordinator(LocalStorage(root), "p", config=settings.config)
    return settings, c, c.begin_epoch(DIAMOND, "r")


def test_watchdog_of_an_epoch_that_spent_the_budget_fails_without_a_retry(tmp_path):
    """An aborted epoch with the failure budget spent: the watchdog's trigger resumes it on a
    worker, where it fails for good (a TaskFailedEvent from the trigger is retried by
    Airflow, which held the run open a retry_delay longer); within the budget it is skipped
    from the triggerer."""
    import asyncio

    from airflow.sdk.exceptions import AirflowFailException
    from airflow.triggers.base import TaskSkippedEvent, TriggerEvent
    from dag_checkpoints.operators import EpochTimeoutOperator
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    def first_event(tolerable: int, root: Path):
        settings, c, b = _open_epoch(root, tolerable_failed_epochs=tolerable)
        c.abort(b.epoch_id, "declined", "bad input", declined_by="a")
        trigger = EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id, b.deadline, 30.0)
        return settings, asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 10))

    settings, event = first_event(0, tmp_path / "spent")
    assert type(event) is TriggerEvent and "budget exhausted" in event.payload["fail"]
    op = EpochTimeoutOperator(task_id="checkpoint_timeout", settings=settings,
                              begin_task_id="checkpoint_begin")
    with pytest.raises(AirflowFailException, match="budget exhausted"):
        op.execute_complete({}, event.payload)
    _, event = first_event(1, tmp_path / "within")
    assert isinstance(event, TaskSkippedEvent)


def test_watchdog_aborts_an_overdue_epoch_from_the_triggerer(tmp_path):
    """Past its deadline the trigger aborts the epoch (reason timeout, the unacknowledged
    tasks named) and records its alert itself, then ends the watchdog as the decision says,
    without resuming on a worker: a worker slot may be minutes away on a busy deployment."""
    import asyncio

    from airflow.triggers.base import TaskSkippedEvent, TriggerEvent
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    from checkpointing.records.alerts import read_alert
    from tests.helpers import DIAMOND, ack_task

    def first_event(tolerable: int, root: Path):
        settings, c, b = _open_epoch(root, timeout_seconds=1,
                                     tolerable_failed_epochs=tolerable)
        ack_task(c, b.epoch_id, "src_a", files={"state": b"a"}, tmp=root.parent)
        trigger = EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id, b.deadline, 30.0)
        event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 10))
        return c, b, event

    c, b, event = first_event(1, tmp_path / "within")
    assert isinstance(event, TaskSkippedEvent)
    meta = c.metadata(b.epoch_id)
    assert meta.status == "aborted" and meta.reason == "timeout"
    assert set(meta.missing_tasks) == set(DIAMOND) - {"src_a"}
    alert = read_alert(c.storage, c.layout, b.epoch_id)
    assert alert is not None and alert.reason == "timeout"
    _, _, event = first_event(0, tmp_path / "spent")
    assert type(event) is TriggerEvent and "budget exhausted" in event.payload["fail"]


def test_watchdog_resumed_on_a_worker_ends_an_overdue_epoch_as_the_trigger_would(tmp_path):
    """When the trigger could not expire the epoch (its storage call raised) it resumes the
    task on a worker with an "overdue" event: the worker aborts the epoch and ends the task
    as the trigger would have, skipped within the failure budget, failed beyond it."""
    import time

    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
    from dag_checkpoints.operators import EpochTimeoutOperator

    for tolerable, raised in ((1, AirflowSkipException), (0, AirflowFailException)):
        settings, c, b = _open_epoch(tmp_path / f"t{tolerable}", timeout_seconds=1,
                                     tolerable_failed_epochs=tolerable)
        op = EpochTimeoutOperator(task_id="checkpoint_timeout", settings=settings,
                                  begin_task_id="checkpoint_begin")
        event = {"epoch_id": b.epoch_id, "status": "overdue"}
        assert op.execute_complete({}, event) == "pending"  # before its deadline
        assert c.metadata(b.epoch_id) is None
        time.sleep(1.2)
        with pytest.raises(raised, match="timeout"):
            op.execute_complete({}, event)
        meta = c.metadata(b.epoch_id)
        assert meta.status == "aborted" and meta.reason == "timeout"


def test_deadline_alert_expires_the_epoch_at_its_own_deadline(tmp_path):
    """The DAG's Deadline Alert fires timeout_seconds after the run was queued, before the
    epoch's own deadline (its barrier was written later): its callback waits for that
    deadline, then aborts the epoch and alerts once; an epoch decided meanwhile is left as
    it was, and nothing is alerted."""
    import asyncio
    import threading
    import time

    from dag_checkpoints.timeouts import deadline_missed

    from checkpointing.protocol.documents import parse_iso
    from checkpointing.records.alerts import read_alert
    from tests.helpers import DIAMOND, ack_task

    for complete in (False, True):
        root = tmp_path / f"c{complete}"
        settings, c, b = _open_epoch(root, timeout_seconds=2, tolerable_failed_epochs=1)
        if complete:  # its tasks acknowledge and its commit step completes it meanwhile
            def finish(c=c, b=b, root=root):
                for t in DIAMOND:
                    ack_task(c, b.epoch_id, t, files={"state": t.encode()}, tmp=root.parent)
                c.complete(b.epoch_id)
            threading.Timer(0.5, finish).start()
        asyncio.run(asyncio.wait_for(deadline_missed(
            {"dag_run": {"dag_run_id": "r"}}, checkpoint=settings.to_kwargs()), 20))
        assert time.time() >= parse_iso(b.deadline)  # not before the epoch's own deadline
        meta = c.metadata(b.epoch_id)
        alert = read_alert(c.storage, c.layout, b.epoch_id)
        if complete:
            assert meta.status == "completed" and alert is None
        else:
            assert meta.status == "aborted" and meta.reason == "timeout"
            assert alert is not None and alert.reason == "timeout"
    # A run whose epoch is decided, or which never opened one, returns at once.
    t0 = time.monotonic()
    asyncio.run(deadline_missed({"dag_run": {"dag_run_id": "r"}},
                                checkpoint=settings.to_kwargs()))
    asyncio.run(deadline_missed({"dag_run": {"dag_run_id": "other"}},
                                checkpoint=settings.to_kwargs()))
    assert time.monotonic() - t0 < 5


def test_watchdog_enforces_the_deadline_while_airflow_does_not_answer(tmp_path, monkeypatch):
    """The trigger's question to Airflow (the commit step's state) never answered, as when
    a busy triggerer's channel to Airflow stalled for minutes: the epoch is still aborted
    at its deadline, from storage, and the question is asked once, not again every turn."""
    import asyncio
    import time

    from airflow.triggers.base import TaskSkippedEvent
    from dag_checkpoints.triggers import epoch_deadline

    from checkpointing.protocol.documents import parse_iso

    asked: list[str] = []

    async def never_answers(dag_id, run_id, task_ids):  # noqa: ANN001, ARG001
        asked.append(run_id)
        await asyncio.Event().wait()

    monkeypatch.setattr(epoch_deadline, "run_task_states", never_answers)
    settings, c, b = _open_epoch(tmp_path / "ckpt", timeout_seconds=2,
                                 tolerable_failed_epochs=1)
    trigger = epoch_deadline.EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id,
                                                  b.deadline, 30.0, "d", "r",
                                                  "checkpoint_commit")

    async def first_event():
        gen = trigger.run()
        try:
            return await asyncio.wait_for(gen.__anext__(), timeout=20)
        finally:
            await gen.aclose()

    event = asyncio.run(first_event())
    assert isinstance(event, TaskSkippedEvent)
    meta = c.metadata(b.epoch_id)
    assert meta.status == "aborted" and meta.reason == "timeout"
    assert parse_iso(meta.decided_at) - parse_iso(b.deadline) < 5
    assert asked == ["r"]
    assert time.time() >= parse_iso(b.deadline)


def test_storage_that_does_not_answer_is_retried_a_refusal_is_final():
    """A task failing on storage that is down (a MinIO restart) spends a retry; one the
    protocol refused (fenced, decided, malformed) fails for good."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
    from dag_checkpoints.task_epoch import task_failure

    from checkpointing.errors import (
        EpochAlreadyDecided,
        MalformedDocument,
        NotFound,
        StaleAttempt,
        StorageError,
    )

    down = task_failure(StorageError("cannot reach S3 endpoint"), "ingest")
    assert type(down) is AirflowException and str(down) == "ingest: cannot reach S3 endpoint"
    # The line names the document, never where the storage or the data live.
    from dag_checkpoints.settings import CheckpointSettings

    roots = CheckpointSettings(pipeline_id="p", storage="s3://ckpt/pre/",
                               data="s3://lake/raw").roots
    where = task_failure(StorageError("cannot reach S3 endpoint http://minio:9000 for "
                                      "s3://ckpt/pre/p/epochs/0000000004/_metadata; "
                                      "s3a://lake/raw/day.csv"), "ingest", *roots)
    assert str(where) == ("ingest: cannot reach S3 endpoint http://minio:9000 for "
                          "<storage>/p/epochs/0000000004/_metadata; <storage>/day.csv")

    # The epoch steps (begin, commit, watchdog) fail so on storage that does not answer.
    from dag_checkpoints.task_epoch import storage_failures

    class Step:
        task_id = "checkpoint_commit"
        settings = CheckpointSettings(pipeline_id="p", storage="s3://ckpt/pre/")

        @storage_failures
        def execute(self, exc: Exception) -> None:
            raise exc

    with pytest.raises(AirflowException) as down:
        Step().execute(StorageError("cannot reach S3 endpoint x for "
                                    "s3://ckpt/pre/p/epochs/0000000001/_metadata"))
    assert str(down.value) == ("checkpoint_commit: cannot reach S3 endpoint x for "
                               "<storage>/p/epochs/0000000001/_metadata")
    with pytest.raises(NotFound):  # not a storage outage: unchanged
        Step().execute(NotFound("not found: x"))
    for refused in (NotFound("x"), StaleAttempt("x"), EpochAlreadyDecided("x"),
                    MalformedDocument("x")):
        assert isinstance(task_failure(refused, "ingest"), AirflowFailException)


def test_a_job_error_naming_storage_fails_with_a_line_without_it():
    """Spark's errors carry each file's full path: the task's failure line (what the UI,
    alerts and notifications show) keeps the error's type and first line with storage and
    data written <storage>; an error naming neither, or one of ours, passes unchanged."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
    from dag_checkpoints.settings import CheckpointSettings
    from dag_checkpoints.task_epoch import job_failure, redacted_traceback

    roots = CheckpointSettings(pipeline_id="p", storage="s3://ckpt/pre/",
                               data="s3://lake/raw").roots

    class SparkConnectGrpcException(Exception):
        pass

    spark = SparkConnectGrpcException(
        "\n[FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
        "s3a://lake/raw/weather/2013-01-12.csv. SQLSTATE: KD001\n\nJVM stacktrace:\n"
        "org.apache.spark.SparkException\n\tat getFileStatus on "
        "s3a://ckpt/pre/p/epochs/0000000004/state/x.parquet")
    failure = job_failure(spark, "ingest_weather", *roots)
    assert type(failure) is AirflowException
    assert str(failure) == ("ingest_weather: SparkConnectGrpcException: [FAILED_READ_FILE."
                            "NO_HINT] Encountered error while reading file <storage>/weather/"
                            "2013-01-12.csv. SQLSTATE: KD001")
    try:
        raise spark
    except SparkConnectGrpcException as exc:
        trace = redacted_traceback(exc, *roots)
    assert "JVM stacktrace" in trace and "test_plugin_units.py" in trace
    assert "s3a://" not in trace and "lake/raw" not in trace and "ckpt/pre" not in trace
    long = ValueError("x" * 2000 + " s3://lake/raw/a")
    assert str(job_failure(long, "t", *roots)) == "t: ValueError: " + "x" * 488
    assert job_failure(ValueError("a bug in the job"), "t", *roots) is None
    assert job_failure(AirflowFailException("t: s3://lake/raw/a"), "t", *roots) is None


def test_every_spelling_of_a_root_is_redacted_in_our_lines_and_masked_in_others():
    """Our lines write a root <storage> in each spelling (a file:// URI and its bare path,
    an s3:// root and Spark's s3a://); every other line a task logs goes through Airflow's
    secrets masker, which mask_roots gives the same spellings."""
    from airflow.sdk.log import redact as masked
    from dag_checkpoints.task_epoch import mask_roots

    from checkpointing.redaction import redact

    local, s3 = "file:///srv/ckpt-spellings/", "s3://lake-spellings/raw"
    text = ("at file:///srv/ckpt-spellings/p/_metadata, /srv/ckpt-spellings/p/x.json, "
            "s3a://lake-spellings/raw/a.csv and s3://lake-spellings/raw/b.csv")
    assert redact(text, local, s3) == ("at <storage>/p/_metadata, <storage>/p/x.json, "
                                       "<storage>/a.csv and <storage>/b.csv")
    assert masked(text) == text  # nothing masked before the task says what
    mask_roots(local, s3)
    assert masked(text) == "at ***/p/_metadata, ***/p/x.json, ***/a.csv and ***/b.csv"


def test_commit_trigger_fires_on_the_last_acknowledgement_or_when_jobs_end(tmp_path,
                                                                          monkeypatch):
    """The commit step waits beside the jobs: its trigger fires with the epoch's decision,
    read every 0.3 s once every job runs or has finished (its ordinary poll is 30 s here),
    or when every job has finished in Airflow with the epoch undecided (the fallback that
    completes or aborts it); a run with checkpointing disabled (epoch 0) waits for the jobs
    only."""
    import asyncio
    import threading

    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.triggers import EpochCommitTrigger, epoch_commit

    from checkpointing import Coordinator
    from checkpointing.storage import LocalStorage
    from tests.helpers import DIAMOND, ack_task

    settings = CheckpointSettings("p", storage=f"file://{tmp_path}/ckpt")
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    jobs = sorted(DIAMOND)
    airflow_says: dict[str, str] = {}
    asked: list[dict[str, str]] = []

    async def states(dag_id, run_id, task_ids):
        asked.append(dict(airflow_says))
        return {t: airflow_says[t] for t in task_ids if t in airflow_says}

    monkeypatch.setattr(epoch_commit, "run_task_states", states)

    def first_event(epoch_id: int, fire_on_last_level: bool = False):
        trigger = EpochCommitTrigger(settings.to_kwargs(), epoch_id, "d", "r", jobs, 30.0,
                                     fire_on_last_level)

        async def run():
            return await asyncio.wait_for(trigger.run().__anext__(), timeout=10)
        return asyncio.run(run()).payload

    # The last level runs: the step resumes on a worker now, to wait there.
    b = c.begin_epoch(DIAMOND, "r")
    airflow_says.update({t: "success" for t in jobs} | {jobs[-1]: "running"})
    assert first_event(b.epoch_id, True) == {"epoch_id": b.epoch_id, "status": "last_level"}
    airflow_says.update({jobs[-1]: "queued"})  # the executor has it: its process starts
    assert first_event(b.epoch_id, True) == {"epoch_id": b.epoch_id, "status": "last_level"}
    airflow_says.update({jobs[-1]: "scheduled"})  # not yet: it waits for a slot
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(EpochCommitTrigger(
            settings.to_kwargs(), b.epoch_id, "d", "r", jobs, 30.0).run().__anext__(), 1.5))
    airflow_says.update({jobs[-1]: "queued"})  # without fire_on_last_level: the decision
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(EpochCommitTrigger(
            settings.to_kwargs(), b.epoch_id, "d", "r", jobs, 30.0, False
        ).run().__anext__(), 1.5))
    # Handed back after a worker's wait: its acknowledgement completes the epoch 0.5 s in.
    for task, tp in DIAMOND.items():
        ack_task(c, b.epoch_id, task, files={"state": task.encode()},
                 outputs={"gold": b"g"} if tp.publishes else None, tmp=tmp_path)
    airflow_says.update({jobs[-1]: "running"})
    threading.Timer(0.5, lambda: c.complete(b.epoch_id)).start()
    assert first_event(b.epoch_id) == {"epoch_id": b.epoch_id, "status": "completed"}

    # A job failed, the others are done: the epoch is still undecided.
    b2 = c.begin_epoch(DIAMOND, "r2")
    airflow_says.update({t: "success" for t in jobs} | {jobs[0]: "failed",
                                                        jobs[-1]: "upstream_failed"})
    assert first_event(b2.epoch_id) == {"epoch_id": b2.epoch_id, "status": "jobs_finished"}
    assert c.decision(b2.epoch_id) is None  # the trigger decides nothing itself

    # Checkpointing disabled: no storage read, the jobs' end only.
    asked.clear()
    airflow_says.update({jobs[0]: "running"})
    threading.Timer(0.3, lambda: airflow_says.update({jobs[0]: "success"})).start()
    assert first_event(0) == {"epoch_id": 0, "status": "jobs_finished"}
    assert len(asked) >= 2


def test_a_resumed_commit_step_hands_a_long_wait_back_to_the_triggerer(tmp_path, monkeypatch):
    """Resumed while the last jobs run, the commit step waits on its worker only so long
    (a long last job must not hold a worker slot); then it defers again, to a trigger that
    fires on the decision or the jobs' end only, not on the last level once more."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import TaskDeferred
    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.operators import epoch as epoch_ops

    from checkpointing import Coordinator
    from checkpointing.storage import LocalStorage
    from tests.helpers import DIAMOND

    settings = CheckpointSettings("p", storage=f"file://{tmp_path}/ckpt")
    b = Coordinator(LocalStorage(tmp_path / "ckpt"), "p").begin_epoch(DIAMOND, "r")
    monkeypatch.setattr(epoch_ops, "WORKER_WAIT_SECONDS", 0.5)
    step = epoch_ops.CommitEpochOperator(task_id="checkpoint_commit", settings=settings,
                                         job_task_ids=sorted(DIAMOND))
    running = {t: "running" for t in DIAMOND}

    class TI:
        def get_task_states(self, dag_id, run_ids):
            return {"r": running}

    context = {"ti": TI(), "dag_run": SimpleNamespace(dag_id="d", run_id="r", conf={},
                                                      triggering_user_name="admin")}
    with pytest.raises(TaskDeferred) as deferred:
        step.execute_complete(context, {"epoch_id": b.epoch_id, "status": "last_level"})
    trigger = deferred.value.trigger
    assert trigger.epoch_id == b.epoch_id and trigger.fire_on_last_level is False
    assert deferred.value.method_name == "execute_complete"


def _child_modules(q):  # runs in a process the forkserver forked
    import sys

    q.put(sorted(m for m in ("pyspark.sql.connect.session", "great_expectations",
                             "spark_jobs.runtime", "airflow.sdk.execution_time.task_runner")
                 if m in sys.modules))


def test_forkserver_preload_hands_the_imports_to_forked_processes():
    """What `[scheduler] mp_start_method = forkserver` with `mp_forkserver_preload =
    dag_checkpoints.preload,great_expectations` does for LocalExecutor's workers: a process
    forked by that server starts with the task's heavy modules imported; the preload module
    itself leaves no thread running (a fork would copy none of them)."""
    import subprocess
    import sys

    from tests.airflow_env import PRELOAD_ENV, ROOT

    ctx = __import__("multiprocessing").get_context("forkserver")
    modules = PRELOAD_ENV["AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD"].split(",")
    ctx.set_forkserver_preload(modules)
    q = ctx.Queue()
    p = ctx.Process(target=_child_modules, args=(q,))
    p.start()
    got = q.get(timeout=120)
    p.join(30)
    assert got == ["airflow.sdk.execution_time.task_runner", "great_expectations",
                   "pyspark.sql.connect.session", "spark_jobs.runtime"]
    # In an interpreter of its own (this one has threads of its own): no thread besides the
    # main one after the import, and a module that fails to import is skipped, not fatal.
    r = subprocess.run([sys.executable, "-c",
                        "from dag_checkpoints import preload as p; "
                        "print('RESULT', p.extra_threads(), "
                        "p.preload(('no_such_module_x', 'json')), "
                        "'pyspark.sql.connect.session' in p.IMPORTED, p.PLUGINS_LOADED)"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    # Airflow's plugin loading logs to stdout: the last line is the answer
    assert r.stdout.splitlines()[-1].split() == ["RESULT", "[]", "['json']", "True", "True"]


def test_an_epochs_answer_names_its_table_inputs_without_their_location(tmp_path):
    """The REST API's epoch detail carries the barrier; a table input in it is named by its
    format and table, never by the path it lives at (no storage path in any answer)."""
    import json

    import pandas as pd
    from deltalake import write_deltalake

    from checkpointing import Coordinator, LocalStorage, TableInput
    from checkpointing.protocol.barrier import plan_from_edges
    from plugins.dag_checkpoints.api import _public_barrier

    location = f"file://{tmp_path}/lake/gold_flights_enriched"
    write_deltalake(f"{tmp_path}/lake/gold_flights_enriched", pd.DataFrame({"x": [1]}))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    b = c.begin_epoch(plan_from_edges({"t": []}, table_inputs={"t": {
        "flights": TableInput(location)}}), "r1")
    answer = _public_barrier(b)
    assert answer["plan"]["t"]["table_inputs"] == {
        "flights": {"format": "delta", "table": "gold_flights_enriched"}}
    assert answer["table_versions"] == {"flights": {"version": 0}}
    assert str(tmp_path) not in json.dumps(answer)
    assert str(tmp_path) in json.dumps(b.to_json())  # the document itself keeps it


def test_a_stale_pipeline_is_announced_once_through_the_webhook(tmp_path, monkeypatch):
    """announce_stale, called by every begin and every abort, delivers through the same
    Airflow notifier as a timeout (a real HttpNotifier to a local receiver), once."""
    import json

    from dag_checkpoints.notifications import AlertSettings, announce, announce_stale

    from checkpointing import CheckpointConfig, Coordinator, LocalStorage
    from tests.helpers import DIAMOND, FakeClock, race, run_epoch
    from tests.sinks import WebhookSink

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


def _fake_airflow(answers: list[tuple[int, dict]], backfills: list[dict],
                  with_runs: set[int] | None = None):
    """An HTTP server answering POST /api/v2/backfills from ``answers`` in turn, GET
    /api/v2/backfills with ``backfills`` (a list the test may change), GET
    /api/v2/backfills/<id> from it, and a DAG's backfill runs: one per backfill of
    ``with_runs`` (default: all), carrying its conf. Airflow's answers under a locked
    SQLite, which cannot be provoked on purpose."""
    import json as _json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from urllib.parse import urlsplit

    posts: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict) -> None:
            data = _json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802 - http.server's name
            posts.append(_json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self._send(*answers.pop(0))

        do_PATCH = do_POST  # noqa: N815 - a run's state change, answered the same way

        def do_GET(self):  # noqa: N802
            path = urlsplit(self.path).path
            if path == "/api/v2/backfills":
                self._send(200, {"backfills": backfills})
            elif path.startswith("/api/v2/backfills/"):
                found = [b for b in backfills if str(b["id"]) == path.rsplit("/", 1)[1]]
                if found:
                    self._send(200, found[0])
                else:
                    self._send(404, {"detail": "gone"})
            elif path.endswith("/dagRuns"):
                self._send(200, {"dag_runs": [
                    {"conf": b["dag_run_conf"]} for b in backfills
                    if with_runs is None or b["id"] in with_runs]})
            else:
                self._send(404, {"detail": path})

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, posts


@pytest.mark.parametrize("committed", [True, False])
def test_a_backfill_refused_with_a_database_error_is_found_or_asked_again(committed):
    """Airflow answers 500 "Database error" when its audit log's insert meets SQLite's
    lock: the backfill it may have committed is found by its lineage, else asked again."""
    from datetime import date

    from dag_checkpoints.airflow_api import AirflowApi

    conf = {"checkpoint": {"lineage": "bf-1"}}
    error = (500, {"detail": {"reason": "Database error", "message": "Serious error"}})
    mine = {"id": 7, "completed_at": None, "dag_run_conf": conf}
    other = {"id": 3, "completed_at": None, "dag_run_conf": {"checkpoint": {"lineage": "x"}}}
    server, posts = _fake_airflow([error, (200, {"id": 8})],
                                  [other, mine] if committed else [other])
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        got = api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
    finally:
        server.shutdown()
    assert got == (7 if committed else 8)
    assert len(posts) == (1 if committed else 2)
    assert all(p["dag_run_conf"] == conf for p in posts)


@pytest.mark.parametrize("refusals", [1, 3])
def test_a_run_state_change_refused_with_a_database_error_is_sent_again(refusals,
                                                                       monkeypatch):
    """The abort route fails the epoch's run through Airflow's API: a change that Airflow
    refused with 500 "Database error" (its audit log's insert met SQLite's lock, nothing
    changed) is sent again, twice at most; the third refusal is the answer."""
    from dag_checkpoints import airflow_api
    from dag_checkpoints.airflow_api import AirflowApi, AirflowApiError

    monkeypatch.setattr(airflow_api, "RUN_STATE_PAUSES", (0.0, 0.0))
    error = (500, {"detail": {"reason": "Database error", "message": "Serious error"}})
    server, sent = _fake_airflow([error] * refusals + [(200, {"state": "failed"})], [])
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        if refusals < 3:
            assert api.set_run_state("d", "manual__2024-01-02T00:00:00+00:00",
                                     "failed") == "failed"
        else:
            with pytest.raises(AirflowApiError, match="Database error"):
                api.set_run_state("d", "manual__2024-01-02T00:00:00+00:00", "failed")
    finally:
        server.shutdown()
    assert sent == [{"state": "failed"}] * min(refusals + 1, 3)


@pytest.mark.parametrize("running", ["none", "mine", "another"])
def test_a_backfill_refused_as_already_running_is_found_or_asked_again(running, monkeypatch):
    """After a 503, Airflow may refuse the session's second request with 409 because of the
    first one's backfill, which it commits and then removes: this request's backfill is
    found by its lineage; when no backfill runs any more the request is sent again; another
    backfill of the DAG still running is the user's conflict, answered as such."""
    from datetime import date

    from dag_checkpoints import airflow_api
    from dag_checkpoints.airflow_api import AirflowApi, AirflowApiError

    monkeypatch.setattr(airflow_api, "VISIBLE_AFTER", (0.0, 0.0))
    conf = {"checkpoint": {"lineage": "bf-2"}}
    refused = (409, {"detail": "There is already a running backfill for dag d"})
    listed = {"none": [{"id": 4, "completed_at": "2024-01-01T00:00:00Z",
                        "dag_run_conf": conf}],
              "mine": [{"id": 5, "completed_at": None, "dag_run_conf": conf}],
              "another": [{"id": 6, "completed_at": None,
                           "dag_run_conf": {"checkpoint": {"lineage": "x"}}}]}[running]
    server, posts = _fake_airflow([refused, (200, {"id": 9})], listed)
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        if running == "another":
            with pytest.raises(AirflowApiError, match="already a running backfill"):
                api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
        else:
            got = api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
            assert got == {"none": 9, "mine": 5}[running]
    finally:
        server.shutdown()
    assert len(posts) == {"none": 2, "mine": 1, "another": 1}[running]


@pytest.mark.parametrize("fate", ["removed", "kept"])
def test_a_backfill_found_without_runs_is_not_taken(fate, monkeypatch):
    """The first request's backfill, found after the 409, has no runs: Airflow's removal of
    it may land seconds later. Taking its id left a backfill that never ran, and main runs
    waiting for it. Removed, the request is sent again; kept without runs (the removal
    failed), the caller is told to ask again once Airflow releases the DAG."""
    import threading
    from datetime import date

    from dag_checkpoints import airflow_api
    from dag_checkpoints.airflow_api import AirflowApi, AirflowApiError

    monkeypatch.setattr(airflow_api, "VISIBLE_AFTER", (0.0, 0.2, 0.2, 0.2))
    conf = {"checkpoint": {"lineage": "bf-3"}}
    refused = (409, {"detail": "There is already a running backfill for dag d"})
    backfills = [{"id": 1, "completed_at": None, "dag_run_conf": conf}]
    server, posts = _fake_airflow([refused, (200, {"id": 2})], backfills, with_runs=set())
    if fate == "removed":  # Airflow's late removal of the orphan
        threading.Timer(0.3, backfills.clear).start()
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        if fate == "kept":
            with pytest.raises(AirflowApiError, match="without its runs") as err:
                api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
            assert err.value.status == 503
        else:
            assert api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf) == 2
    finally:
        server.shutdown()
    assert len(posts) == {"removed": 2, "kept": 1}[fate]


def test_a_run_that_ended_has_its_pending_epochs_cancelled_by_the_listener(tmp_path, capfd,
                                                                        caplog):
    """Airflow's on_dag_run_failed with the run's DAG as the api-server holds it (serialized):
    the listener reads the DAG's settings from its begin step and cancels the run's pending
    epoch in the background; a DAG without checkpoint steps is left alone; a registry that
    cannot be read is one logged line (no path in it), nothing raised."""
    from types import SimpleNamespace

    from airflow.sdk import DAG
    from airflow.sdk.bases.operator import BaseOperator
    from airflow.serialization.serialized_objects import DagSerialization
    from dag_checkpoints import (
        CheckpointedSparkOperator,
        CheckpointSettings,
        checkpoint_dag,
        run_listener,
    )

    from checkpointing import Coordinator
    from checkpointing.protocol.barrier import TaskPlan
    from checkpointing.storage import LocalStorage

    class Plain(BaseOperator):
        def execute(self, context):  # pragma: no cover - never run here
            return None

    with DAG("listener_test", schedule=None) as dag:
        CheckpointedSparkOperator(task_id="a", job="spark_jobs.flights.stats:route_stats")
    checkpoint_dag(dag, CheckpointSettings("listener_test", storage=f"file://{tmp_path}/ckpt"))
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "listener_test")
    b = c.begin_epoch({"a": TaskPlan((), False)}, "manual__1")

    thread = run_listener._cancel_in_background(
        SimpleNamespace(dag=served, run_id="manual__1"), "failed",
        "Dag Run's state was manually set to `failed`.")
    thread.join(30)
    meta = c.decision(b.epoch_id)
    assert (meta.status, meta.reason) == ("aborted", "cancelled"), meta
    assert meta.detail == ("its DAG run ended failed before the epoch was decided (Dag Run's "
                           "state was manually set to `failed`.)")
    assert c.registry().lineage("main").consecutive_failed == 0

    with DAG("listener_plain", schedule=None) as plain:
        Plain(task_id="p")
    assert run_listener._cancel_in_background(
        SimpleNamespace(dag=DagSerialization.from_dict(DagSerialization.to_dict(plain)),
                        run_id="manual__1"), "failed", "m") is None

    bad = Coordinator(LocalStorage(tmp_path / "bad"), "listener_test")
    (tmp_path / "bad" / bad.layout.counter).parent.mkdir(parents=True)
    (tmp_path / "bad" / bad.layout.counter).write_text("{not json")
    unreadable = CheckpointSettings("listener_test", storage=f"file://{tmp_path}/bad")
    capfd.readouterr()
    caplog.clear()
    assert run_listener.cancel_run_epochs(unreadable, "manual__1", "d") == []
    # Once Airflow configured logging, its handler writes to the process's stdout; else
    # pytest's handler has the record.
    logged = caplog.text + "".join(capfd.readouterr())
    assert "the pending epochs of run manual__1 were not cancelled (MalformedDocument)" \
        in logged and str(tmp_path) not in logged, logged


def test_fault_injection_is_a_drill_refused_unless_the_deployment_enables_drills(monkeypatch):
    """Whoever may trigger a DAG with a conf could fail or hang its tasks: a run's
    fault_inject (or a worker's CKPT_FAULT_INJECT) is refused in one line unless Airflow's
    [dag_checkpoints] drills is on; with it, the drill runs as asked."""
    from types import SimpleNamespace

    import pytest
    from airflow.sdk.exceptions import AirflowFailException
    from dag_checkpoints.operators.spark import FAULT_ENV, fault_spec

    monkeypatch.delenv(FAULT_ENV, raising=False)
    drill = {"dag_run": SimpleNamespace(conf={"checkpoint": {"fault_inject": "stats:1"}})}
    plain = {"dag_run": SimpleNamespace(conf={})}
    monkeypatch.delenv("AIRFLOW__DAG_CHECKPOINTS__DRILLS", raising=False)
    assert fault_spec(plain) == ""  # no drill asked: nothing to refuse
    with pytest.raises(AirflowFailException) as refused:
        fault_spec(drill)
    assert str(refused.value) == (
        "fault injection ('stats:1') is a drill, and drills are off in this deployment: "
        "enable them with AIRFLOW__DAG_CHECKPOINTS__DRILLS=True on the workers")
    monkeypatch.setenv(FAULT_ENV, "stats:2:hang")
    with pytest.raises(AirflowFailException, match="drills are off"):
        fault_spec(plain)
    monkeypatch.setenv("AIRFLOW__DAG_CHECKPOINTS__DRILLS", "True")
    assert fault_spec(drill) == "stats:1" and fault_spec(plain) == "stats:2:hang"


def test_metrics_carry_the_dag_id_of_the_dag_the_settings_checkpoint(tmp_path, monkeypatch):
    """The documented dag_id tag: settings that checkpoint_dag gave a DAG's steps make
    coordinators whose metrics listener tags the DAG (and the pipeline)."""
    from dataclasses import replace

    from dag_checkpoints import CheckpointSettings

    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    settings = replace(CheckpointSettings("dag_tag", storage=f"file://{tmp_path}/ckpt"),
                       dag_id="dag_tag_dag")
    assert settings.coordinator().listener.inner.tags == {"pipeline": "dag_tag",
                                                          "dag_id": "dag_tag_dag"}
    assert CheckpointSettings.from_kwargs(settings.to_kwargs()).dag_id == "dag_tag_dag"

