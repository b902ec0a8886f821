"""Operators that make a DAG run an epoch: a visible begin step, wrapped jobs that restore,
run, snapshot and acknowledge, and a visible commit step."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from checkpointing import TaskPlan, run_retention
from checkpointing.errors import CheckpointError, EpochIncomplete, PolicyViolation
from checkpointing.lineages import MAIN, read_origin

from .alerts import announce
from .runconf import checkpoint_conf
from .settings import CheckpointSettings

BEGIN_TASK_ID = "checkpoint_begin"
COMMIT_TASK_ID = "checkpoint_commit"
#: Fault injection for tests and drills: "<task_id>:<attempt>" fails that attempt after its
#: snapshot and before its acknowledgement, the worst moment for exactly-once.
FAULT_ENV = "CKPT_FAULT_INJECT"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _interval(context: Any) -> dict[str, str] | None:
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        return None
    return {"start": start.isoformat(), "end": end.isoformat()}


class BeginEpochOperator(BaseOperator):
    """Opens the run's epoch (writes its barrier) and returns the epoch id (XCom).

    Idempotent per DAG run: a cleared or retried begin step reuses the run's open epoch.
    """

    ui_color = "#b3e2cd"

    def __init__(self, *, settings: CheckpointSettings, plan: dict[str, TaskPlan],
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.settings, self.plan = settings, plan

    def execute(self, context: Any) -> int:
        coord = self.settings.coordinator()
        run_id = context["dag_run"].run_id
        lineage, publish = self._lineage(coord, context)
        existing = coord.open_epoch_for_run(run_id, lineage)
        if existing is not None:
            self.log.info("run %s continues its open epoch %d", run_id, existing.epoch_id)
            return existing.epoch_id
        try:
            barrier = coord.begin_epoch(self.plan, run_id, lineage=lineage,
                                        publish_on_complete=publish,
                                        data_interval=_interval(context),
                                        input_range={"logical_date": str(
                                            context.get("logical_date"))})
        except PolicyViolation as exc:
            raise AirflowException(f"cannot open an epoch now: {exc}") from None
        except CheckpointError as exc:
            raise AirflowFailException(f"cannot open an epoch: {exc}") from None
        self.log.info("opened epoch %d of %s, lineage %s (parent %s, savepoint %s)%s",
                      barrier.epoch_id, self.settings.pipeline_id, lineage,
                      barrier.parent_epoch_id, barrier.parent_savepoint,
                      "" if publish else "; publishes nothing (not the backfill's last run)")
        return barrier.epoch_id

    @staticmethod
    def _lineage(coord: Any, context: Any) -> tuple[str, bool]:
        """(lineage, publish on complete) of this run: ``main`` and publish, unless the run
        belongs to a backfill from a checkpoint (``conf["checkpoint"]["lineage"]``), whose
        epochs publish only at the backfill's last logical date."""
        conf = checkpoint_conf(getattr(context["dag_run"], "conf", None))
        lineage = str(conf.get("lineage") or MAIN)
        if lineage == MAIN:
            return MAIN, True
        origin = read_origin(coord.storage, coord.layout, lineage)
        if origin is None:
            raise AirflowFailException(f"run conf names lineage {lineage!r}, which has no "
                                       "origin record: start backfills with ckpt-airflow "
                                       "backfill or the REST API")
        logical = context.get("logical_date")
        day = logical.date().isoformat() if logical is not None else None
        return lineage, day == origin.publish_at


class CheckpointedJobOperator(BaseOperator):
    """Runs one job of ``spark_jobs`` for the run's epoch under the checkpoint contract.

    A retry (``try_number`` > 1) is a new, fencing attempt that restores from the parent
    epoch and the epoch's acknowledged upstream handles; a task that already acknowledged
    the epoch is not run again.
    """

    ui_color = "#fdcdac"

    def __init__(self, *, job: str, settings: CheckpointSettings,
                 begin_task_id: str = BEGIN_TASK_ID, **kwargs: Any):
        super().__init__(**kwargs)
        self.job, self.settings, self.begin_task_id = job, settings, begin_task_id

    def execute(self, context: Any) -> dict[str, int]:
        epoch, attempt = _epoch_and_attempt(context, self.begin_task_id)
        return self._in_process(epoch, attempt, _fault_spec(context))

    def _in_process(self, epoch: int, attempt: int, fault: str = "") -> dict[str, int]:
        from spark_jobs.harness import DeclineEpoch, run_task, spark_session
        from spark_jobs.pipeline import JOBS

        job = _with_fault(JOBS[self.job], self.task_id, attempt, fault)
        coord = self.settings.coordinator()
        spark = spark_session(f"{self.settings.pipeline_id}.{self.task_id}",
                              s3=self.settings.storage.startswith("s3"),
                              endpoint_url=self.settings.endpoint_url)
        try:
            ack = run_task(job, coord, epoch, self.task_id, attempt, spark, self.settings.data,
                           endpoint_url=self.settings.endpoint_url)
        except DeclineEpoch as exc:
            raise AirflowFailException(f"{self.task_id} declined epoch {epoch}: {exc}") from None
        except CheckpointError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        self.log.info("acknowledged epoch %d as attempt %d: %s", epoch, ack.attempt,
                      ack.state_handle.row_counts)
        return dict(ack.state_handle.row_counts)


def _epoch_and_attempt(context: Any, begin_task_id: str) -> tuple[int, int]:
    ti = context["ti"]
    epoch = ti.xcom_pull(task_ids=begin_task_id)
    if epoch is None:
        raise AirflowFailException(f"no epoch: {begin_task_id} has not run")
    return int(epoch), ti.try_number


class CheckpointedSparkSubmitOperator(SparkSubmitOperator):
    """Submit mode: the same job, through Airflow's SparkSubmitOperator, to the Spark master
    of the connection ``settings.spark_conn_id``. The job's code goes with ``--py-files``;
    the driver follows the same contract (``spark_jobs/submit.py``): exit code 3 means it
    declined the epoch."""

    ui_color = "#fdcdac"

    def __init__(self, *, job: str, settings: CheckpointSettings,
                 begin_task_id: str = BEGIN_TASK_ID, **kwargs: Any):
        import pyspark

        kwargs.setdefault("conn_id", settings.spark_conn_id)
        kwargs.setdefault("name", f"{settings.pipeline_id}.{job}")
        # pyspark's own spark-submit, whatever PATH the worker has
        kwargs.setdefault("spark_binary", str(Path(pyspark.__file__).parent / "bin/spark-submit"))
        super().__init__(application=str(REPO_ROOT / "spark_jobs/submit.py"), **kwargs)
        self.job, self.settings, self.begin_task_id = job, settings, begin_task_id

    def execute(self, context: Any) -> None:
        from spark_jobs.package import build_jobs_zip

        epoch, attempt = _epoch_and_attempt(context, self.begin_task_id)
        s = self.settings
        self.py_files = str(build_jobs_zip(Path(tempfile.mkdtemp(prefix="ckpt-submit-")) /
                                           "ckpt_jobs.zip"))
        self.application_args = [self.job, "--storage", s.storage, "--pipeline", s.pipeline_id,
                                 "--data", s.data, "--epoch", str(epoch),
                                 "--attempt", str(attempt)]
        if s.endpoint_url:
            self.application_args += ["--endpoint-url", s.endpoint_url]
        self.env_vars = {"PYSPARK_PYTHON": sys.executable,
                         "PYSPARK_DRIVER_PYTHON": sys.executable, **(self.env_vars or {})}
        self._hook = self._get_hook()  # built from the arguments of this try
        check_master_reachable(self._hook._connection["master"])
        try:
            super().execute(context)
        except AirflowException as exc:
            if "Error code is: 3" in str(exc):
                raise AirflowFailException(f"{self.task_id} declined epoch {epoch}") from None
            raise


def check_master_reachable(master: str, timeout: float = 5.0) -> None:
    """Fail fast, naming the master, when a ``spark://`` master does not accept connections
    (spark-submit itself retries for a minute and then prints a stack trace)."""
    url = urlparse(master)
    if url.scheme != "spark":
        return
    for hostport in url.netloc.split(","):  # spark://h1:7077,h2:7077 (standby masters)
        host, _, port = hostport.partition(":")
        try:
            socket.create_connection((host, int(port or 7077)), timeout=timeout).close()
            return
        except OSError:
            continue
    raise AirflowException(f"Spark master {master} is unreachable (no answer within "
                           f"{timeout:g}s); check the Spark connection and that the master runs")


def _fault_spec(context: Any) -> str:
    """The drill a run asks for: ``conf["checkpoint"]["fault_inject"]``, else the
    ``CKPT_FAULT_INJECT`` environment variable (in-process mode only)."""
    conf = checkpoint_conf(getattr(context.get("dag_run"), "conf", None))
    return str(conf.get("fault_inject") or os.environ.get(FAULT_ENV, ""))


def _with_fault(job: Any, task_id: str, attempt: int, spec: str = "") -> Any:
    """Wrap ``job`` with the fault ``spec`` names for this attempt, if any:
    ``task:attempt`` fails after the snapshot; ``task:attempt:hang`` sleeps there for
    ``CKPT_FAULT_HANG_SECONDS`` (a silently hanging task, for timeout drills)."""
    target, _, mode = spec.partition(f"{task_id}:{attempt}")
    if target or not spec or mode not in ("", ":hang"):
        return job

    def faulty(run: Any) -> Any:
        result = job(run)  # state written and snapshotted...
        if mode == ":hang":
            time.sleep(float(os.environ.get("CKPT_FAULT_HANG_SECONDS", 600)))
            return result
        raise RuntimeError(f"injected fault ({FAULT_ENV}={spec}): after the snapshot of "
                           f"attempt {attempt}, before its acknowledgement")

    return faulty


class CommitEpochOperator(BaseOperator):
    """Completes the run's epoch, which publishes its outputs (phase two).

    Runs when all jobs are done, whatever their state: an epoch that cannot complete is
    aborted now (not left to its timeout), naming the tasks that did not acknowledge. The
    DAG run fails with a clear message once the tolerable-failure budget is spent.
    """

    ui_color = "#b3e2cd"

    def __init__(self, *, settings: CheckpointSettings, begin_task_id: str = BEGIN_TASK_ID,
                 **kwargs: Any):
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.settings, self.begin_task_id = settings, begin_task_id

    def execute(self, context: Any) -> int:
        epoch = context["ti"].xcom_pull(task_ids=self.begin_task_id)
        if epoch is None:
            raise AirflowFailException("no epoch to commit: the begin step did not run")
        coord = self.settings.coordinator()
        try:
            meta = coord.complete(int(epoch))
        except EpochIncomplete:
            missing = coord.missing_tasks(int(epoch))
            meta = coord.abort(int(epoch), "declined",
                               f"task(s) {missing} failed without acknowledging",
                               declined_by=missing[0] if missing else None)
        self._retain(coord)
        if meta.completed:
            self.log.info("epoch %d completed%s", meta.epoch_id,
                          " and published" if coord.barrier(meta.epoch_id).publish_on_complete
                          else " (publishes nothing: not the backfill's last run)")
            return meta.epoch_id
        barrier = coord.barrier(int(epoch))
        announce(coord, meta, barrier, self.settings.alerts, context)
        lineage = barrier.lineage
        failed = coord.registry().lineage(lineage).consecutive_failed
        msg = (f"epoch {meta.epoch_id} aborted ({meta.reason}: {meta.detail}); "
               f"{failed} consecutive failed epoch(s), tolerable "
               f"{self.settings.config.tolerable_failed_epochs}")
        if coord.failure_budget_exhausted(lineage):
            raise AirflowFailException(f"checkpoint failure budget exhausted: {msg}")
        self.log.warning("%s: within the failure budget, the next epoch picks up its input",
                         msg)
        return meta.epoch_id

    def _retain(self, coord: Any) -> None:
        """Retention after each decision, as Flink does on completion: old and aborted
        epochs go, files still referenced stay. Never fails the commit."""
        try:
            rep = run_retention(coord)
        except CheckpointError as exc:
            self.log.warning("retention skipped: %s", exc)
            return
        if rep.deleted_epochs:
            self.log.info("retention deleted epoch(s) %s (%d objects, %d shared files)",
                          rep.deleted_epochs, rep.deleted_objects, rep.deleted_shared)
