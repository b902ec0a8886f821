"""Operators that make a DAG run an epoch: a visible begin step, wrapped jobs that restore,
run, snapshot and acknowledge, and a visible commit step."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from checkpointing import TaskPlan
from checkpointing.errors import CheckpointError, EpochIncomplete, PolicyViolation

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
        existing = coord.open_epoch_for_run(run_id)
        if existing is not None:
            self.log.info("run %s continues its open epoch %d", run_id, existing.epoch_id)
            return existing.epoch_id
        try:
            barrier = coord.begin_epoch(self.plan, run_id, data_interval=_interval(context),
                                        input_range={"logical_date": str(
                                            context.get("logical_date"))})
        except PolicyViolation as exc:
            raise AirflowException(f"cannot open an epoch now: {exc}") from None
        self.log.info("opened epoch %d of %s (parent %s)", barrier.epoch_id,
                      self.settings.pipeline_id, barrier.parent_epoch_id)
        return barrier.epoch_id


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
        ti = context["ti"]
        epoch = ti.xcom_pull(task_ids=self.begin_task_id)
        if epoch is None:
            raise AirflowFailException(f"no epoch: {self.begin_task_id} has not run")
        attempt = ti.try_number
        if self.settings.spark_mode == "submit":
            return self._submit(int(epoch), attempt)
        return self._in_process(int(epoch), attempt)

    def _in_process(self, epoch: int, attempt: int) -> dict[str, int]:
        from spark_jobs.harness import DeclineEpoch, run_task, spark_session
        from spark_jobs.pipeline import JOBS

        job = _with_fault(JOBS[self.job], self.task_id, attempt)
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

    def _submit(self, epoch: int, attempt: int) -> dict[str, int]:
        from spark_jobs.package import build_jobs_zip

        zip_path = build_jobs_zip(Path(tempfile.mkdtemp(prefix="ckpt-submit-")) /
                                  "ckpt_jobs.zip")
        import pyspark

        cmd = [str(Path(pyspark.__file__).parent / "bin/spark-submit"),
               "--master", self.settings.spark_master or "local[2]",
               "--py-files", str(zip_path), str(REPO_ROOT / "spark_jobs/submit.py"), self.job,
               "--storage", self.settings.storage, "--pipeline", self.settings.pipeline_id,
               "--data", self.settings.data, "--epoch", str(epoch), "--attempt", str(attempt)]
        if self.settings.endpoint_url:
            cmd += ["--endpoint-url", self.settings.endpoint_url]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable}
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)  # noqa: S603
        for line in r.stderr.splitlines()[-20:]:
            self.log.info("spark-submit: %s", line)
        if r.returncode == 3:
            raise AirflowFailException(f"{self.task_id} declined epoch {epoch}")
        if r.returncode != 0:
            raise AirflowException(f"spark-submit of {self.job} failed (exit {r.returncode})")
        return {}


def _with_fault(job: Any, task_id: str, attempt: int) -> Any:
    spec = os.environ.get(FAULT_ENV, "")
    if spec != f"{task_id}:{attempt}":
        return job

    def faulty(run: Any) -> Any:
        job(run)  # state written and snapshotted...
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
        if meta.completed:
            self.log.info("epoch %d completed and published", meta.epoch_id)
            return meta.epoch_id
        lineage = coord.barrier(int(epoch)).lineage
        failed = coord.registry().lineage(lineage).consecutive_failed
        msg = (f"epoch {meta.epoch_id} aborted ({meta.reason}: {meta.detail}); "
               f"{failed} consecutive failed epoch(s), tolerable "
               f"{self.settings.config.tolerable_failed_epochs}")
        if coord.failure_budget_exhausted(lineage):
            raise AirflowFailException(f"checkpoint failure budget exhausted: {msg}")
        self.log.warning("%s: within the failure budget, the next epoch picks up its input",
                         msg)
        return meta.epoch_id
