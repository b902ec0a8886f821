"""Which epoch a task of a DAG run works for, and opening it.

The epoch begins with the first task that needs it (PROTOCOL 6.1, 1.10): the begin step and
the run's root jobs are started together, and each begins or joins the run's epoch, so no
job waits a scheduler loop for the begin step. Roots racing each other share one epoch
(:meth:`checkpointing.Coordinator.begin_or_join`).

What keeps Airflow's clear and retry meaning what they meant with a begin step in front:

- once the begin step succeeded in this run, its epoch (its XCom) is the run's: a retried
  root joins that epoch, and fails there if it was decided meanwhile, as before;
- while the begin step has not succeeded (it runs beside the roots, or the whole run was
  cleared and it has not run again), a root begins or joins: the run's open epoch, else a
  new one;
- a job downstream takes the epoch its checkpointed upstream tasks acknowledged (their
  ``checkpoint_epoch`` XCom), which is the epoch it must align with.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
)

from checkpointing import TaskPlan
from checkpointing.errors import (
    CheckpointError,
    NotFound,
    PolicyViolation,
    PreconditionFailed,
    PromotingBackfillRunning,
    StorageError,
)
from checkpointing.protocol.barrier import plan_table_inputs
from checkpointing.protocol.registry import MAIN
from checkpointing.redaction import redact, spellings
from checkpointing.tables.changes import event_version

from ..hooks.checkpoint import CheckpointHook
from ..notifications import announce_resolved, announce_stale
from ..shared.runconf import BEGIN_TASK_ID, checkpoint_conf, data_interval
from ..shared.settings import CheckpointSettings
from .in_process_leases import LEASES

if TYPE_CHECKING:
    from airflow.sdk import Context

    from checkpointing import Coordinator

log = logging.getLogger(__name__)

#: the XCom key under which each checkpointed task records the epoch it works for
EPOCH_XCOM_KEY = "checkpoint_epoch"
#: how long a main run waits before it looks again for a promoting backfill
WAIT_FOR_BACKFILL_SECONDS = 30
#: tries of a call for the run's task states, beyond the SDK's own retries of the HTTP
#: request, and the pause between them (:func:`task_states`)
STATE_CALL_TRIES = 3
STATE_CALL_PAUSE_SECONDS = 2.0


def open_run_epoch(settings: CheckpointSettings, plan: dict[str, TaskPlan], context: Context,
                   allow_non_restored_state: bool = False) -> int:
    """Begin the run's epoch, or join the one the run has open; its id. A run whose epochs
    are all decided begins a new one (the caller knows it may). Airflow's answers: a
    promoting backfill reschedules the task without spending a retry, a policy (capacity,
    pause) is a retryable failure, anything else refused fails the task."""
    coord = CheckpointHook(settings).get_coordinator()
    run_id = context["dag_run"].run_id
    lineage, publish, promote = run_lineage(coord, context)
    try:
        barrier = coord.begin_or_join(plan, run_id, lineage=lineage,
                                      publish_on_complete=publish,
                                      data_interval=data_interval(context),
                                      allow_non_restored_state=allow_non_restored_state,
                                      promote=promote, owner=context["dag_run"].dag_id,
                                      input_range={"logical_date": str(
                                          context.get("logical_date"))},
                                      min_table_versions=triggering_table_versions(
                                          plan, context))
    except PromotingBackfillRunning as exc:
        # Wait for the backfill without spending a retry: this run continues from it.
        log.info("%s; trying again in %ds", exc, WAIT_FOR_BACKFILL_SECONDS)
        raise AirflowRescheduleException(datetime.now(UTC) + timedelta(
            seconds=WAIT_FOR_BACKFILL_SECONDS)) from None
    except PolicyViolation as exc:
        raise AirflowException(f"cannot open an epoch now: {exc}") from None
    except CheckpointError as exc:
        raise task_failure(exc, "cannot open an epoch", *settings.roots) from None
    announce_stale(coord, settings.alerts, lineage, context)
    announce_resolved(coord, settings.alerts, lineage, context)
    if runs_in_process():
        LEASES.hold(coord, settings.storage, barrier.epoch_id)
    log.info("run %s works for epoch %d of %s, lineage %s (parent %s, savepoint %s)%s",
             run_id, barrier.epoch_id, settings.pipeline_id, lineage, barrier.parent_epoch_id,
             barrier.parent_savepoint,
             "" if publish else "; publishes nothing (not the backfill's last run)")
    return barrier.epoch_id


def runs_in_process() -> bool:
    """Whether Airflow runs this task inside the process that runs the whole DAG run
    (``airflow dags test``, ``airflow tasks test``): no scheduler watches that process,
    so if it is killed nothing else would ever end its epoch. Airflow says so only through
    the task runner's supervisor channel (its in-process kind); a killed `dags test` whose
    next run aborts the epoch as ``runner_lost`` (tests/system/test_airflow_dags.py) fails
    if that stops telling."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # an Airflow without the in-process supervisor
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)


def epoch_begun_by_a_job(settings: CheckpointSettings, context: Context) -> int | None:
    """The epoch a job of this run began before the begin step's first try ran (the roots
    begin or join beside it), even a decided one: a one-task DAG's job completes it, a
    decline aborts it, and it stays the run's epoch. None on a later try (a cleared run's
    begin step begins anew when the run's epochs are decided) or when no job began one."""
    if context["ti"].try_number != 1:
        return None
    coord = CheckpointHook(settings).get_coordinator()
    lineage = run_lineage(coord, context)[0]
    ids = coord.epochs_of_run(context["dag_run"].run_id, lineage)
    return ids[-1] if ids else None


def triggering_table_versions(plan: dict[str, TaskPlan], context: Context) -> dict[str, int]:
    """Per table input, the newest version the asset events that triggered this run
    announce (a DAG scheduled on an upstream pipeline's table output): the epoch must read
    at least that far (PROTOCOL 6.14)."""
    inputs = plan_table_inputs(plan)
    found: dict[str, int] = {}
    if not inputs:
        return found
    try:
        events = dict(context.get("triggering_asset_events") or {})
    except Exception:  # noqa: BLE001 - a run without asset events (manual, scheduled)
        return found
    for evs in events.values():
        for ev in evs or ():
            table = (getattr(ev, "extra", None) or {}).get("table") or {}
            for name, spec in inputs.items():
                v = event_version(spec, table)
                if v is not None:
                    found[name] = max(found.get(name, v), v)
    return found


def task_failure(exc: CheckpointError, what: str, *roots: str) -> AirflowException:
    """How a task fails on ``exc``: storage that did not answer (down, restarting,
    throttling) is worth Airflow's retries; anything else the protocol refused is final.
    The line names the document, not where ``roots`` (the storage's) live: task logs are
    read by everyone who may read the DAG."""
    message = redact(f"{what}: {exc}", *roots)
    transient = isinstance(exc, StorageError) and not isinstance(exc, NotFound |
                                                                  PreconditionFailed)
    return AirflowException(message) if transient else AirflowFailException(message)


#: The longest failure line a job's error gives (its first line; Spark's carry a JVM stack).
JOB_FAILURE_CHARS = 500


def job_failure(exc: BaseException, what: str, *roots: str) -> AirflowException | None:
    """How a task fails on an error its job raised that names where storage or data live
    (Spark's messages carry each file's full path, ``s3a://bucket/...``): a retried failure,
    as the error itself would be, whose line keeps the error's type and first line with
    those places written ``<storage>``. None when it names neither: the error passes
    unchanged, traceback and all. The operator logs the whole traceback, redacted, for
    whoever debugs the job."""
    if isinstance(exc, AirflowException):  # ours: already a line without the roots
        return None
    text = str(exc)
    redacted = redact(text, *roots)
    if redacted == text:
        return None
    first = next((part.strip() for part in redacted.splitlines() if part.strip()), "")
    line = f"{type(exc).__name__}: {first}"
    return AirflowException(f"{what}: {line[:JOB_FAILURE_CHARS]}")


def redacted_traceback(exc: BaseException, *roots: str) -> str:
    """``exc``'s traceback (Python's and, in its message, the JVM's) without the roots."""
    import traceback

    return redact("".join(traceback.format_exception(exc)), *roots)


def mask_roots(*roots: str) -> None:
    """Hide where storage and data live, in each spelling of each root, from everything
    this task logs from now on: Airflow's secrets masker, in the task's process and its
    supervisor, writes them ``***``. Our own lines say ``<storage>`` already; this is for
    the lines we do not write (Spark's, spark-submit's command and output, pyspark's gRPC
    errors), which carry each file's full path."""
    from airflow.sdk.log import mask_secret

    for root in roots:
        for spelling in spellings(root):
            mask_secret(spelling)


def storage_failures(method: Callable[..., Any]) -> Callable[..., Any]:
    """An operator method (of an operator with ``settings``) that logs without the roots
    (:func:`mask_roots`) and whose storage that did not answer fails the try as
    :func:`task_failure` says: retried, in a line that names the document but not where
    storage lives. Other errors pass unchanged."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        mask_roots(*self.settings.roots)
        try:
            return method(self, *args, **kwargs)
        except StorageError as exc:
            if isinstance(exc, NotFound | PreconditionFailed):
                raise
            raise task_failure(exc, self.task_id, *self.settings.roots) from None
    return wrapper


def run_lineage(coord: Coordinator, context: Context) -> tuple[str, bool, bool]:
    """(lineage, publish on complete, promote) of this run: ``main``, publish, no
    promotion, unless the run belongs to a backfill from a checkpoint
    (``conf["checkpoint"]["lineage"]``), whose epochs publish only at the backfill's last
    logical date, which also continues the main line if the backfill asked to."""
    conf = checkpoint_conf(getattr(context["dag_run"], "conf", None))
    lineage = str(conf.get("lineage") or MAIN)
    if lineage == MAIN:
        return MAIN, True, False
    origin = coord.catalog.origin(lineage)
    if origin is None:
        raise AirflowFailException(f"run conf names lineage {lineage!r}, which has no "
                                   "origin record: start backfills with ckpt-airflow "
                                   "backfill or the REST API")
    logical = context.get("logical_date")
    day = logical.date().isoformat() if logical is not None else None
    last = day == origin.publish_at
    return lineage, last, last and origin.promote


def task_epoch(task: Any, context: Context) -> int:
    """The epoch the checkpointed ``task`` works for in this run (see the module's rules),
    recorded in its ``checkpoint_epoch`` XCom for the tasks downstream."""
    ti = context["ti"]
    ups = list(task.epoch_plan[task.task_id].upstream)  # derived from the DAG by the wiring
    epoch: int | None
    if ups:
        epoch = _upstream_epoch(ti, ups)
    else:
        epoch = _begun_epoch(ti, context, task.begin_task_id)
        if epoch is None:
            epoch = open_run_epoch(task.settings, task.epoch_plan, context,
                                   task.allow_non_restored_state)
    ti.xcom_push(key=EPOCH_XCOM_KEY, value=epoch)
    return epoch


def _upstream_epoch(ti: Any, ups: list[str]) -> int:
    """The one epoch the upstream tasks acknowledged."""
    pulled = ti.xcom_pull(task_ids=ups, key=EPOCH_XCOM_KEY)
    values = pulled if isinstance(pulled, list) else [pulled]
    epochs = {int(v) for v in values if v is not None}
    if not epochs:  # upstream tasks of before 1.10 left the begin step's XCom only
        epoch = ti.xcom_pull(task_ids=BEGIN_TASK_ID)
        if epoch is None:
            raise AirflowFailException(f"no epoch: the upstream tasks {ups} recorded none")
        return int(epoch)
    if len(epochs) > 1:
        raise AirflowFailException(
            f"the upstream tasks {ups} acknowledged different epochs {sorted(epochs)}: a part "
            "of the run was cleared alone; clear the whole run to run it again")
    return epochs.pop()


def _begun_epoch(ti: Any, context: Context, begin_task_id: str) -> int | None:
    """The begin step's epoch when the begin step succeeded in this run (its XCom); None
    while it has not (a stale XCom of a run cleared whole is not the run's epoch)."""
    if task_states(context).get(begin_task_id) != "success":
        return None
    epoch = ti.xcom_pull(task_ids=begin_task_id)
    return None if epoch is None else int(epoch)


def task_states(context: Context) -> dict[str, str]:
    """Airflow's state of each task of this run (``ti.get_task_states``, which the task's
    supervisor asks of the API server, retrying as ``[workers] execution_api_retries``
    says). A call that still fails is asked again, :data:`STATE_CALL_TRIES` times in all,
    :data:`STATE_CALL_PAUSE_SECONDS` apart, then fails the task in one line naming the
    call (a retryable failure): a state guessed empty would skip a run whose job failed,
    label a failed task "not run", or have a root begin an epoch the begin step already
    began."""
    ti, run = context["ti"], context["dag_run"]
    tries = STATE_CALL_TRIES
    for n in range(1, tries + 1):
        try:
            states = ti.get_task_states(dag_id=run.dag_id, run_ids=[run.run_id])
        except Exception as exc:  # noqa: BLE001 - whatever the SDK raises, named below
            why = _first_line(exc)
            if n == tries:
                raise AirflowException(
                    f"Airflow's API did not answer get_task_states (run {run.run_id!r} of "
                    f"DAG {run.dag_id!r}) after {tries} tries: {why}") from None
            log.warning("get_task_states (run %s) failed, try %d of %d: %s", run.run_id, n,
                        tries, why)
            time.sleep(STATE_CALL_PAUSE_SECONDS)
            continue
        return dict(states.get(run.run_id, {}))
    raise AssertionError("unreachable: the last try returns or raises")


def run_ended(context: Context) -> str | None:
    """``failed`` or ``success`` when this task's DAG run has already ended (an operator
    marked it in Airflow's UI or REST API, or the scheduler failed it at its
    ``dagrun_timeout``), else None. Asked of Airflow's API now (the run in the context is
    the one the try started with); a task instance without the call, or a call that fails,
    reads as a running run, the decision then being the commit step's usual one."""
    ti, run = context["ti"], context["dag_run"]
    ask = getattr(ti, "get_dagrun_state", None)
    if ask is None:
        return None
    try:
        state = str(ask(dag_id=run.dag_id, run_id=run.run_id)).lower()
    except Exception as exc:  # noqa: BLE001 - whatever the SDK raises: the usual decision
        log.warning("get_dagrun_state (run %s) failed: %s", run.run_id, _first_line(exc))
        return None
    state = state.rsplit(".", 1)[-1]  # an enum's text, "DagRunState.FAILED"
    return state if state in ("failed", "success") else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
