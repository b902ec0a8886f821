"""``CheckpointedSparkOperator``: any Spark job, by reference, as one checkpointed task.

The job is ``"package.module:function"`` (or the function itself, which is referenced by
its module and name): a function of a :class:`spark_jobs.runtime.JobRun` returning a
:class:`spark_jobs.runtime.JobResult`. The operator runs it for the DAG run's epoch under
the checkpoint contract: Airflow's ``try_number`` is the attempt, so a retry fences the
older try, restores from the parent epoch and this epoch's acknowledged upstream handles,
and a task that already acknowledged is not run again.

Where Spark runs is the DAG's ``CheckpointSettings.spark_mode``: ``connect`` (a Spark Connect
session on the server of the ``spark_connect`` connection: the task holds a thin client, the
driver is long-lived), ``local`` (a Spark of the task process's own) or ``submit``
(spark-submit to the master of the Spark connection, with the job's package shipped by
``--py-files``, or ``application=`` a file of the user's that calls
:func:`spark_jobs.runtime.main`).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from checkpointing.errors import CheckpointError
from checkpointing.redaction import redact
from checkpointing.tables.expectations import unchanged_table_inputs

from ..hooks.checkpoint import CheckpointHook
from ..hooks.spark import open_session, remote_url, submit_hook
from ..shared.expected_inputs import (
    data_day,
    expected_keys,
    grace_seconds,
    missing_keys,
    validate_templates,
)
from ..shared.runconf import BEGIN_TASK_ID, checkpointing_enabled, data_interval
from ..shared.settings import CheckpointSettings
from ..task.drills import fault_spec, with_fault
from ..task.task_epoch import (
    EPOCH_XCOM_KEY,
    job_failure,
    mask_roots,
    redacted_traceback,
    task_epoch,
    task_failure,
    task_states,
)
from .table_version_wait import AwaitsTableVersions

if TYPE_CHECKING:
    from airflow.sdk import Context

_EXIT_CODE = re.compile(r"Error code is: (\d+)\.")
#: the XCom key under which a task of a run with checkpointing disabled passes its state
#: handle to its downstream tasks
UNCHECKED_HANDLE_KEY = "checkpoint_handle"


def process_age_ms() -> float | None:
    """Milliseconds since this process started (Linux /proc), None elsewhere: how long a
    task spent being started and importing before its job."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round((uptime - start_ticks / os.sysconf("SC_CLK_TCK")) * 1000, 1)


class CheckpointedSparkOperator(AwaitsTableVersions, BaseOperator):
    """One checkpointed Spark job of the DAG's epoch (restore, run, snapshot, acknowledge).

    :param job: ``"package.module:function"`` or a module-level function.
    :param outputs: names of the outputs the job stages for publication
        (``run.writer.publish_files``/``stage_output``); each is an Airflow Asset the commit
        step emits when the epoch completes and publishes.
    :param publishes: the job's staged outputs are published when the epoch completes
        (implied by ``outputs``).
    :param settings: the DAG's checkpoint settings; :func:`checkpoint_dag` sets them on
        every checkpointed task that has none.
    :param application: submit mode only: a Python file of yours that calls
        ``spark_jobs.runtime.main(job)``; default: the runtime's generic entry point.
    :param table_inputs: upstream Delta or Iceberg tables the job reads incrementally,
        ``{name: TableInput(...)}``: the epoch's barrier pins each one's version, and the
        job reads the change since its parent epoch with ``run.table_changes(name)``.
        One declared with ``expect_new_version=True`` makes the run wait, deferred, for up
        to ``input_grace`` for a version newer than its parent epoch read, before the epoch
        begins; then this task declines an epoch that pinned none (one line, one alert).
    :param expects: keys under the data root the job needs for its data day, with a
        ``{data_day}`` placeholder (``raw/flights/{data_day}.csv``): when one is missing
        at the start, the task waits for it deferred for up to ``input_grace``, then
        declines its epoch with one line naming the missing keys
        (the epoch is aborted and alerted once). Without ``expects``, a day whose input
        never landed is an epoch with nothing new.
    :param input_grace: how long a missing expected input (a file, a table version) may
        still land after the task started (a ``timedelta`` or seconds; default 0: decline
        at once). Shorter than the checkpoint timeout, which would abort the epoch first.
    """

    template_fields: Sequence[str] = ("job",)
    ui_color = "#fdcdac"
    #: what the plan derivation looks for (also set by the TaskFlow decorator's operator)
    is_checkpointed = True
    #: a job given as a callable must be importable by reference (see the decorator)
    strict_reference = True

    def __init__(self, *, job: str | Callable[..., Any], outputs: Sequence[str] = (),
                 publishes: bool = False,
                 settings: CheckpointSettings | None = None, application: str | None = None,
                 begin_task_id: str = BEGIN_TASK_ID,
                 table_inputs: dict[str, Any] | None = None, expects: Sequence[str] = (),
                 input_grace: timedelta | float = 0, **kwargs: Any):
        super().__init__(**kwargs)
        from checkpointing.protocol.table_inputs import TableInput, validate_inputs
        from spark_jobs.runtime import job_reference

        # A string: workers import it, nothing is pickled. A TaskFlow function keeps its
        # callable for local mode; its reference only matters under spark-submit.
        self.job: str = job_reference(job) if self.strict_reference else (
            job if isinstance(job, str) else f"{job.__module__}:{job.__qualname__}")
        self.outputs = tuple(outputs)
        self.table_inputs = dict(table_inputs or {})
        validate_inputs(self.table_inputs)
        for name, spec in self.table_inputs.items():
            if not isinstance(spec, TableInput):
                raise TypeError(f"{self.task_id}: table input {name!r} must be a TableInput, "
                                f"not {type(spec).__name__}")
        self.expects = validate_templates(expects, f"{self.task_id}: expected input")
        self.input_grace = grace_seconds(input_grace)
        self.publishes, self.settings = publishes or bool(self.outputs), settings
        self.application, self.begin_task_id = application, begin_task_id
        # Set by checkpoint_dag: what a root task needs to begin the run's epoch itself.
        self.epoch_plan: dict[str, Any] | None = None
        self.allow_non_restored_state = False
        #: (Spark session, job tag) of the attempt running in this process, for on_kill
        self._running: tuple[Any, str] | None = None
        #: submit mode: the provider's hook running spark-submit, for on_kill
        self._submit_hook: Any = None
        #: the epoch this attempt acknowledged in this process, for the OpenLineage
        #: provider's call after execute returns (submit mode: read from the XCom)
        self._lineage_epoch: int | None = None
        #: (epoch, attempt) of this attempt once known, for a failed attempt's lineage
        self._attempt: tuple[int, int] | None = None

    def _checked_settings(self) -> CheckpointSettings:
        """The DAG's settings; a task built outside ``checkpoint_dag`` has none."""
        if self.settings is None:
            raise AirflowFailException(f"{self.task_id}: no checkpoint settings; build the DAG "
                                       "with dag_checkpoints.checkpoint_dag(dag, settings)")
        return self.settings

    # ------------------------------------------------------------------ execution
    def execute(self, context: Context) -> dict[str, int] | None:
        if self.settings is None:
            raise AirflowFailException(f"{self.task_id}: no checkpoint settings; build the DAG "
                                       "with dag_checkpoints.checkpoint_dag(dag, settings)")
        mask_roots(*self.settings.roots)
        if not checkpointing_enabled(context):
            return self._unchecked(context)
        if self.epoch_plan is None:
            raise AirflowFailException(f"{self.task_id}: not part of a checkpointed DAG; "
                                       "call dag_checkpoints.checkpoint_dag(dag, settings)")
        drill = fault_spec(context)  # a refused drill fails before any epoch is begun
        if self.expects:
            self._await_expected_input(context)
        if self.table_input_grace > 0 and self._may_begin(context):
            self._await_table_versions(context, self.settings, self.epoch_plan)
        epoch, attempt = task_epoch(self, context), context["ti"].try_number
        self._attempt = (epoch, attempt)
        self._announce_attempt(context, epoch, attempt)
        self._decline_unchanged_tables(context, epoch)
        if self.settings.spark_mode == "submit":
            self._submit(epoch, attempt)
            return None
        return self._in_process(self.job_callable(), epoch, attempt, drill,
                                remote=remote_url(self.settings))

    def _await_expected_input(self, context: Context) -> None:
        """Return when the data day's expected input is there; else defer until it lands
        or the grace ends (:meth:`execute_after_input`), or decline now when it ended."""
        from ..triggers.expected_input import MAX_POLL_SECONDS, ExpectedInputTrigger

        day = data_day(context)
        if day is None:
            raise AirflowFailException(f"{self.task_id}: expects= needs a run with a data "
                                       "interval (its data day fills {data_day})")
        missing = missing_keys(CheckpointHook(self._checked_settings()).get_data_storage(),
                               expected_keys(self.expects, day))
        if not missing:
            return
        if self.input_grace <= 0:
            self._decline_missing(context, missing)
        deadline = time.time() + self.input_grace
        self.log.warning("%s: expected input of %s not there yet (%s): waiting for it, "
                         "deferred, up to %.0f s", self.task_id, day, ", ".join(missing),
                         self.input_grace)
        self.defer(trigger=ExpectedInputTrigger(
            self._checked_settings().to_kwargs(), missing, deadline,
            poll_seconds=min(MAX_POLL_SECONDS, max(1.0, self.input_grace / 20))),
            method_name="execute_after_input")

    def execute_after_input(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resumed from :class:`ExpectedInputTrigger`: run the job on the input that
        landed, or decline the epoch for the input that did not."""
        if event and event.get("status") == "missing":
            self._decline_missing(context, list(event.get("keys") or ()))
        return self.execute(context)

    def _may_begin(self, context: Context) -> bool:
        """A root job begins the run's epoch unless the begin step already did."""
        if self.epoch_plan is None or self.epoch_plan[self.task_id].upstream:
            return False
        return task_states(context).get(self.begin_task_id) != "success"

    def _decline_unchanged_tables(self, context: Context, epoch: int) -> None:
        """Decline the epoch when its barrier pinned a table input expecting a new version
        no newer than the parent epoch did (PROTOCOL 6.14, 1.14)."""
        if not any(s.expect_new_version for s in self.table_inputs.values()):
            return
        try:
            coord = CheckpointHook(self._checked_settings()).get_coordinator()
            lines = unchanged_table_inputs(coord, epoch, self.task_id)
        except CheckpointError as exc:
            raise task_failure(exc, self.task_id, *self._checked_settings().roots) from None
        if lines:
            self._decline(context, epoch, "expected a new table version after waiting "
                          f"{self.table_input_grace:.0f} s: {'; '.join(lines)}")

    def _decline_missing(self, context: Context, missing: list[str]) -> None:
        """Decline the run's epoch for missing input files."""
        self._decline(context, task_epoch(self, context),
                      f"expected input missing after waiting {self.input_grace:.0f} s: "
                      f"{', '.join(missing)}")

    def _decline(self, context: Context, epoch: int, reason: str) -> None:
        """Decline the run's epoch for missing input: one line, the epoch aborted (and
        alerted by the coordinator's abort listener)."""
        attempt = context["ti"].try_number
        coord = CheckpointHook(self._checked_settings()).get_coordinator()
        try:
            start = coord.register_attempt(epoch, self.task_id, attempt)
            if start.existing is None:
                coord.decline(epoch, self.task_id, attempt, reason)
        except CheckpointError as exc:
            raise task_failure(exc, self.task_id, *self._checked_settings().roots) from None
        raise AirflowFailException(f"{self.task_id} declined epoch {epoch}: {reason}")

    def _announce_attempt(self, context: Context, epoch: int, attempt: int) -> None:
        """The try's RUNNING lineage event naming its epoch
        (:func:`..shared.lineage.announce_attempt`), when the OpenLineage provider is
        installed."""
        try:
            from ..shared.lineage import announce_attempt
        except ImportError:  # the OpenLineage provider is not installed: no lineage at all
            return
        coord = CheckpointHook(self._checked_settings()).get_coordinator()
        announce_attempt(context, coord, epoch, attempt)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The OpenLineage provider's call (only when it is configured): the inputs the job
        consumed (data prefixes, table inputs with their versions), its table outputs and
        the ``checkpoint`` run facet, read from its acknowledgement (:mod:`..shared.lineage`)."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        from ..shared.lineage import task_lineage

        epoch = self._lineage_epoch
        if epoch is None and self.settings is not None and self.epoch_plan is not None:
            # submit mode: the driver acknowledged; the epoch is this task's XCom
            epoch = task_instance.xcom_pull(task_ids=self.task_id, key=EPOCH_XCOM_KEY)
        if not epoch or self.settings is None:
            return OperatorLineage()
        return task_lineage(CheckpointHook(self.settings).get_coordinator(),
                            self.settings.data, int(epoch), self.task_id)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed or declined attempt: the run facet naming its epoch and attempt, so a
        lineage tool ties the FAIL event to the epoch (:mod:`..shared.lineage`)."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        from ..shared.lineage import failed_lineage

        if self._attempt is None or self.settings is None:
            return OperatorLineage()
        try:
            return failed_lineage(CheckpointHook(self.settings).get_coordinator(), *self._attempt)
        except Exception as exc:  # noqa: BLE001 - lineage must not hide the task's failure
            self.log.warning("lineage of the failed attempt not read: %s", type(exc).__name__)
            return OperatorLineage()

    def on_kill(self) -> None:
        """Airflow stops this task (marked failed or success, cleared, its run failed, its
        ``execution_timeout``): cancel the attempt's Spark work now. A Spark Connect server
        keeps the operations of a client that went away running, for a retry to reattach to
        (PROTOCOL 6.3), for up to its detached timeout: work Airflow stopped is not wanted
        there. Airflow calls this from its SIGTERM handler; the job then fails on its
        interrupted action, or the process is killed a few seconds later."""
        from spark_jobs.runtime import interrupt_attempt

        if self._submit_hook is not None:  # the provider kills spark-submit and its driver
            self._submit_hook.on_kill()
        if self._running is None:
            return
        spark, tag = self._running
        try:
            ops = interrupt_attempt(spark, tag)
        except Exception as exc:  # noqa: BLE001 - a server gone: nothing runs there anyway
            self.log.warning("%s: could not interrupt its Spark work (%s)", self.task_id,
                             type(exc).__name__)
            return
        self.log.warning("%s stopped by Airflow: interrupted its Spark work (%d running "
                         "operation(s))", self.task_id, len(ops))

    def job_callable(self) -> Callable[..., Any]:
        from spark_jobs.runtime import JobReferenceError, resolve_job

        try:
            return resolve_job(self.job)
        except JobReferenceError as exc:
            raise AirflowFailException(str(exc)) from None

    def _in_process(self, job: Callable[..., Any], epoch: int, attempt: int,
                    fault: str = "", remote: str | None = None) -> dict[str, int]:
        """Run the job in this process, on a Spark of its own or, with ``remote``, as a
        client of that Spark Connect server."""
        from spark_jobs.runtime import (
            ConnectUnsupported,
            DeclineEpoch,
            JobResultError,
            job_tag,
            run_task,
        )

        job = with_fault(job, self.task_id, attempt, fault)
        s = self._checked_settings()
        coord = CheckpointHook(s).get_coordinator()
        overhead = {"process_age_ms": process_age_ms()}  # start and imports, before the job
        t0 = time.monotonic()
        spark = open_session(s, f"{s.pipeline_id}.{self.task_id}", remote)
        overhead["session_ms"] = (time.monotonic() - t0) * 1000
        # The tag run_task gives the attempt's actions: the same inputs, one derivation.
        self._running = (spark, job_tag(coord.pipeline_id, epoch, self.task_id, attempt))
        try:
            ack = run_task(job, coord, epoch, self.task_id, attempt, spark, s.data,
                           endpoint_url=s.endpoint_url, overhead_ms=overhead)
        except DeclineEpoch as exc:
            raise AirflowFailException(f"{self.task_id} declined epoch {epoch}: {exc}") from None
        except CheckpointError as exc:
            raise task_failure(exc, self.task_id, *s.roots) from None
        except (ConnectUnsupported, JobResultError) as exc:
            # the job's own mistake: the same code fails the same way on a retry
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        except Exception as exc:
            if (failure := self._job_failure(exc)) is None:
                raise
            raise failure from None
        finally:
            self._running = None
            if remote:
                spark.stop()  # releases the server-side session now, not at its timeout
        self._lineage_epoch = epoch
        self.log.info("acknowledged epoch %d as attempt %d: %s", epoch, ack.attempt,
                      ack.state_handle.row_counts)
        return dict(ack.state_handle.row_counts)

    def _unchecked(self, context: Context) -> dict[str, int]:
        """Run the job with checkpointing disabled (:mod:`spark_jobs.runtime.unchecked`):
        upstream handles come from the upstream tasks' XComs, this task's goes to its
        own, and its table outputs are committed now."""
        from checkpointing import StateHandle
        from spark_jobs.runtime.unchecked import run_unchecked_task

        s = self._checked_settings()
        if s.spark_mode == "submit":
            raise AirflowFailException(f"{self.task_id}: runs with checkpointing disabled "
                                       "support spark_mode 'local' and 'connect' only")
        ti = context["ti"]
        ups = sorted(t.task_id for t in self.get_flat_relatives(upstream=True)
                     if getattr(t, "is_checkpointed", False))
        pulled = ti.xcom_pull(task_ids=ups, key=UNCHECKED_HANDLE_KEY) if ups else []
        if isinstance(pulled, dict):  # one task's value, whatever the Airflow version
            pulled = [pulled]
        upstream = {t: StateHandle.from_json(h) for t, h in zip(ups, pulled or [],
                                                                 strict=False) if h}
        remote = remote_url(s)
        spark = open_session(s, f"{s.pipeline_id}.{self.task_id}", remote)
        try:
            handle = run_unchecked_task(
                with_fault(self.job_callable(), self.task_id, ti.try_number,
                           fault_spec(context)),
                CheckpointHook(s).get_coordinator(), context["dag_run"].run_id, self.task_id,
                spark, s.data, upstream, data_interval(context), table_inputs=self.table_inputs,
                view=getattr(self, "view_task", None), endpoint_url=s.endpoint_url)
        except Exception as exc:
            if (failure := self._job_failure(exc)) is None:
                raise
            raise failure from None
        finally:
            if remote:
                spark.stop()
        ti.xcom_push(key=UNCHECKED_HANDLE_KEY, value=handle.to_json())
        self.log.info("ran with checkpointing disabled: %s", handle.row_counts)
        return dict(handle.row_counts)

    def _job_failure(self, exc: Exception) -> AirflowException | None:
        """What to raise instead of an error the job raised, if its message says where
        storage or data live (Spark's do): a line without those places, the whole traceback
        logged redacted (see :func:`job_failure`); None: the error itself."""
        roots = self._checked_settings().roots
        failure = job_failure(exc, self.task_id, *roots)
        if failure is None:
            return None
        self.log.error("%s: the job failed:\n%s", self.task_id, redacted_traceback(exc, *roots))
        return failure

    def _submit(self, epoch: int, attempt: int) -> None:
        """spark-submit to the Spark connection's master; the driver runs the runtime's
        entry point, whose exit code 3 means it declined the epoch."""
        from spark_jobs.runtime import build_jobs_zip

        # The jobs' zip lives as long as the submission: spark-submit (client mode) has
        # copied it to the cluster by the time it returns, and a worker that ran a daily
        # DAG's tasks for a year would otherwise keep a directory per task.
        with tempfile.TemporaryDirectory(prefix="ckpt-submit-") as tmp:
            self._submit_zip(build_jobs_zip(Path(tmp) / "jobs.zip", (self.job,)), epoch,
                             attempt)

    def _submit_zip(self, zip_path: Path, epoch: int, attempt: int) -> None:
        """One spark-submit of the runtime's entry point with ``zip_path`` as its
        ``--py-files``."""
        import spark_jobs.runtime.submit as generic
        from spark_jobs.runtime import EXIT_DECLINED

        s = self._checked_settings()
        args = ["--storage", s.storage, "--pipeline", s.pipeline_id, "--data", s.data,
                "--epoch", str(epoch), "--task", self.task_id, "--attempt", str(attempt)]
        if self.application is None:
            args = ["--job", self.job, *args]
        if s.endpoint_url:
            args += ["--endpoint-url", s.endpoint_url]
        hook = submit_hook(s, f"{s.pipeline_id}.{self.task_id}", str(zip_path), args)
        self._submit_hook = hook
        try:
            hook.submit(self.application or generic.__file__)
        except AirflowException as exc:
            m = _EXIT_CODE.search(str(exc))
            if m and int(m.group(1)) == EXIT_DECLINED:
                raise AirflowFailException(f"{self.task_id} declined epoch {epoch}") from None
            # The hook's message is the whole command (--storage, --data) and the output's
            # last lines (Spark's, with each file's path): logged redacted, not the line.
            self.log.error("%s: spark-submit failed: %s", self.task_id,
                           redact(str(exc), *s.roots))
            code = f"exit code {m.group(1)}" if m else "no exit code"
            raise AirflowException(f"{self.task_id}: spark-submit failed ({code}); its "
                                   "output is in the task log") from None
