"""A task's epoch: storage that does not answer, and failures without storage paths."""

from __future__ import annotations

import pytest


def test_storage_that_does_not_answer_is_retried_a_refusal_is_final():
    """A task failing on storage that is down (a MinIO restart) spends a retry; one the
    protocol refused (fenced, decided, malformed) fails for good."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
    from dag_checkpoints.task.task_epoch import task_failure

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
    from dag_checkpoints.shared.settings import CheckpointSettings

    roots = CheckpointSettings(pipeline_id="p", storage="s3://ckpt/pre/",
                               data="s3://lake/raw").roots
    where = task_failure(StorageError("cannot reach S3 endpoint http://minio:9000 for "
                                      "s3://ckpt/pre/p/epochs/0000000004/_metadata; "
                                      "s3a://lake/raw/day.csv"), "ingest", *roots)
    assert str(where) == ("ingest: cannot reach S3 endpoint http://minio:9000 for "
                          "<storage>/p/epochs/0000000004/_metadata; <storage>/day.csv")

    # The epoch steps (begin, commit, watchdog) fail so on storage that does not answer.
    from dag_checkpoints.task.task_epoch import storage_failures

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
    from dag_checkpoints.shared.settings import CheckpointSettings
    from dag_checkpoints.task.task_epoch import job_failure, redacted_traceback

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
    assert "JVM stacktrace" in trace and "test_task_epoch.py" in trace
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
    from dag_checkpoints.task.task_epoch import mask_roots

    from checkpointing.redaction import redact

    local, s3 = "file:///srv/ckpt-spellings/", "s3://lake-spellings/raw"
    text = ("at file:///srv/ckpt-spellings/p/_metadata, /srv/ckpt-spellings/p/x.json, "
            "s3a://lake-spellings/raw/a.csv and s3://lake-spellings/raw/b.csv")
    assert redact(text, local, s3) == ("at <storage>/p/_metadata, <storage>/p/x.json, "
                                       "<storage>/a.csv and <storage>/b.csv")
    assert masked(text) == text  # nothing masked before the task says what
    mask_roots(local, s3)
    assert masked(text) == "at ***/p/_metadata, ***/p/x.json, ***/a.csv and ***/b.csv"


def test_an_airflow_api_that_does_not_answer_fails_the_step_naming_the_call(tmp_path,
                                                                            monkeypatch):
    """The run's task states come from Airflow's API (through the task's supervisor). When
    it does not answer (the error the supervisor sends back for a refused connection), the
    call is asked again a bounded number of times, then the step fails in one line naming
    it, as a retryable failure: never an empty answer taken for "nothing ran", which would
    skip a run whose job failed and call its failed tasks "not run"."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowRuntimeError,
        AirflowSkipException,
        ErrorType,
    )
    from airflow.sdk.execution_time.comms import ErrorResponse
    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.operators.epoch import CommitEpochOperator
    from dag_checkpoints.task import task_epoch

    monkeypatch.setattr(task_epoch, "STATE_CALL_PAUSE_SECONDS", 0.0)
    calls: list[list[str]] = []
    answers: list[dict | None] = []

    class TI:
        def get_task_states(self, dag_id, run_ids):
            calls.append(run_ids)
            answer = answers.pop(0) if answers else None
            if answer is None:
                raise AirflowRuntimeError(ErrorResponse(
                    error=ErrorType.API_SERVER_ERROR,
                    detail={"status_code": None, "exception_type": "ConnectError",
                            "message": "[Errno 111] Connection refused"}))
            return answer

    context = {"ti": TI(), "dag_run": SimpleNamespace(
        dag_id="d", run_id="r", conf={"checkpoint": {"enabled": False}})}
    with pytest.raises(AirflowException) as exc:
        task_epoch.task_states(context)
    assert type(exc.value) is AirflowException  # retryable: not a Fail or a Skip
    msg = str(exc.value)
    assert "get_task_states" in msg and "run 'r' of DAG 'd'" in msg and "\n" not in msg
    assert "Connection refused" in msg and f"{task_epoch.STATE_CALL_TRIES} tries" in msg
    assert len(calls) == task_epoch.STATE_CALL_TRIES

    # The commit step of a run with checkpointing disabled whose job failed: it used to
    # read no state, find no failed task and skip the run as if it had succeeded.
    step = CommitEpochOperator(task_id="checkpoint_commit", job_task_ids=["job"],
                               settings=CheckpointSettings("p", storage=f"file://{tmp_path}"))
    with pytest.raises(AirflowException) as exc:
        step._unchecked(context)
    assert not isinstance(exc.value, AirflowSkipException)
    assert "get_task_states" in str(exc.value)

    # An API that answers on a later try is believed: the job's failure fails the run.
    calls.clear()
    answers[:] = [None, {"r": {"job": "failed"}}]
    with pytest.raises(AirflowException, match=r"task\(s\) \['job'\] failed"):
        step._unchecked(context)
    assert len(calls) == 2


def test_run_ended_reads_the_run_s_state_from_airflow_now():
    """The commit step's question before it decides: has the run been ended in Airflow?
    The answer comes from the API (the context's run is the try's start), an enum or a
    string; a running run, a call that fails or a task instance without it: None."""
    from types import SimpleNamespace

    from airflow.utils.state import DagRunState
    from dag_checkpoints.task.task_epoch import run_ended

    run = SimpleNamespace(dag_id="d", run_id="r")

    def ctx(answer):
        def ask(dag_id, run_id):
            assert (dag_id, run_id) == ("d", "r")
            if isinstance(answer, Exception):
                raise answer
            return answer
        return {"ti": SimpleNamespace(get_dagrun_state=ask), "dag_run": run}

    assert run_ended(ctx(DagRunState.FAILED)) == "failed"
    assert run_ended(ctx("success")) == "success"
    assert run_ended(ctx(DagRunState.RUNNING)) is None
    assert run_ended(ctx(RuntimeError("API down"))) is None
    assert run_ended({"ti": SimpleNamespace(), "dag_run": run}) is None
