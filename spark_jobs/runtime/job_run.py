"""The contract every job follows, through the checkpointing library:

1. register the attempt (fencing); if the task already acknowledged the epoch, do nothing;
2. restore: the task's state handle of the parent epoch, and its upstream tasks' handles of
   *this* epoch (aligned barrier: never another epoch's inputs);
3. run: read only new input, merge it into the restored state, write into an
   attempt-scoped scratch directory, so that a killed attempt's partial files are never read;
4. snapshot (changed files only) and acknowledge with the state handle.

A job that finds its epoch's data unacceptable raises :class:`DeclineEpoch`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpointing import (
    Acknowledgement,
    Coordinator,
    EngineOperation,
    SnapshotWriter,
    StateHandle,
)
from checkpointing.errors import EpochAlreadyDecided
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.documents import now_iso
from checkpointing.protocol.table_inputs import TableVersion
from checkpointing.state.task_storage import TaskStorage
from checkpointing.storage import Storage, open_storage

from .attempt_cache import attempt_caches
from .connect import is_connect, unsupported_feature
from .errors import ConnectUnsupported, DeclineEpoch, JobResultError
from .reattach import release_session
from .run_context import FileListings, NoFileListings, OperationLog
from .run_outputs import RunOutputs

log = logging.getLogger("spark_jobs.runtime")


@dataclass
class JobResult:
    offsets: Any = None
    row_counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


_JSON_SCALARS = (str, int, float, bool, type(None))


def _not_json(value: Any, where: str) -> tuple[str, Any] | None:
    """The first place inside ``value`` holding what a JSON document cannot (a
    ``TableVersion``, a date, a NumPy number, a key that is not a string): (where, it)."""
    if isinstance(value, _JSON_SCALARS):
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if (found := _not_json(item, f"{where}[{i}]")) is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} key {key!r}", key
            if (found := _not_json(item, f"{where}[{key!r}]")) is not None:
                return found
        return None
    return where, value


def check_result(result: Any, task_id: str) -> JobResult:
    """``result`` if a state handle can hold it; else :class:`JobResultError` in one line
    naming the key and its type (what would otherwise fail at the acknowledgement, deep
    in JSON encoding)."""
    if not isinstance(result, JobResult):
        raise JobResultError(f"task {task_id}: the job returned {type(result).__name__}, "
                             "not a JobResult")
    for name in ("offsets", "row_counts", "metrics"):
        found = _not_json(getattr(result, name), name)
        if found is not None:
            where, value = found
            raise JobResultError(
                f"task {task_id}: the job's result {where} is a {type(value).__name__}, "
                "not a JSON value (str, int, float, bool, None, list, or dict with str "
                "keys): convert it, e.g. str(v) or a dict of its fields")
    bad = {k: v for k, v in result.row_counts.items() if not isinstance(v, int)
           or isinstance(v, bool)}
    if bad:
        key = next(iter(bad))
        raise JobResultError(f"task {task_id}: the job's result row_counts[{key!r}] is a "
                             f"{type(bad[key]).__name__}, not an int")
    return result


@dataclass
class JobRun(RunOutputs):
    """Everything a job needs for one attempt of one task in one epoch."""

    #: the epoch's barrier (what the job reads of its epoch; see RunContext)
    barrier: Barrier
    epoch_id: int
    task_id: str
    attempt: int
    spark: Any  # pyspark.sql.SparkSession
    data: Storage | None  # the data root the job reads; None when the run gave none
    previous: StateHandle | None
    upstream: dict[str, StateHandle]
    writer: SnapshotWriter
    scratch: Path
    #: the attempt's view of checkpoint storage (its state and staging areas)
    storage: TaskStorage
    #: where the attempt records the engine operations it starts (a later attempt resumes
    #: them): the coordinator in a checked run, :class:`NoOperationLog` without an epoch
    operations: OperationLog
    #: where the epoch's listings of landed files are recorded (:meth:`new_input` reads
    #: the files the epoch's first listing found): the coordinator in a checked run
    listings: FileListings = field(default_factory=NoFileListings)
    #: milliseconds Spark spent writing the snapshot's state and staged outputs: the
    #: ``sync_ms`` of the handle's timings (the job waits for it, as Flink's synchronous
    #: part); making them durable afterwards is the writer's ``async_ms``
    snapshot_write_ms: float = 0.0
    #: the operation a killed earlier attempt left running (connect mode), which this
    #: attempt resumes when its job reaches the same action (PROTOCOL 6.3)
    resume: EngineOperation | None = None
    #: actions this attempt took over from the earlier attempt's operation
    resumed: list[str] = field(default_factory=list)
    #: per table input, the version the state has consumed (carried from the parent's
    #: handle, advanced by :meth:`table_changes`): the handle's ``table_offsets``
    table_offsets: dict[str, TableVersion] = field(default_factory=dict)
    #: what each table input read this attempt (the handle's ``metrics.table_inputs``)
    table_reads: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per table input read this attempt, its columns renamed in the range read (old name
    #: -> new name, version): a job failing on an old name is told the rename
    table_renames: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    #: the data root's prefixes :meth:`new_input` read (the handle's
    #: ``metrics.input_prefixes``: what lineage names as the task's file inputs)
    input_prefixes: list[str] = field(default_factory=list)
    #: guards ``snapshot_write_ms`` while writes run at once (:meth:`concurrently`)
    _write_lock: Any = field(default_factory=threading.Lock, repr=False, compare=False)
    _writes_running: int = field(default=0, repr=False, compare=False)
    _writes_since: float = field(default=0.0, repr=False, compare=False)


def missed_rename(exc: BaseException,
                  renames: dict[str, dict[str, tuple[str, int]]]) -> str | None:
    """One line naming the rename behind ``exc`` when it is Spark's unresolved column of a
    column a table input renamed in the range the job read; None otherwise."""
    condition = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        kind = str(condition() if callable(condition) else "")
    except Exception:  # noqa: BLE001 - an error without Spark's error class
        kind = ""
    if not kind.startswith("UNRESOLVED_COLUMN"):
        return None
    text = str(exc)
    for name, renamed in renames.items():
        for old, (new, version) in renamed.items():
            if f"`{old}`" in text:
                return (f"table input {name!r}: column {old!r} was renamed to {new!r} at "
                        f"version {version}, and the job still reads {old!r}: read "
                        f"{new!r} instead (the epoch is declined; the next reads the same "
                        "change once the job is updated)")
    return None


def _restored_from(barrier: Barrier, previous: StateHandle | None) -> str:
    """What a task restores, for its log: a retry's first question is "from where?"."""
    if previous is None:
        source = (f"savepoint {barrier.parent_savepoint!r}" if barrier.parent_savepoint else
                  f"epoch {barrier.parent_epoch_id}" if barrier.parent_epoch_id else None)
        return ("starts from empty state (no parent epoch)" if source is None else
                f"starts from empty state ({source} holds no state of this task)")
    files = previous.all_files()
    size = sum(f.size for f in files)
    via = f" (savepoint {barrier.parent_savepoint!r})" if barrier.parent_savepoint else ""
    return (f"restores from epoch {previous.epoch_id}{via}: attempt {previous.attempt}, "
            f"{len(files)} file(s), {size} bytes")


Job = Callable[[JobRun], JobResult]


def job_tag(pipeline_id: str, epoch_id: int, task_id: str, attempt: int) -> str:
    """The Spark job tag of one attempt's actions (``spark.addTag``): Spark's UI and REST
    API list every job an attempt ran under it, and ``spark.interruptTag`` cancels them.
    Tags may not hold commas; ids never do (PROTOCOL 3)."""
    return f"ckpt.{pipeline_id}.{task_id}.e{epoch_id}.a{attempt}"


def interrupt_attempt(spark: Any, tag: str) -> list[str]:
    """Cancel the Spark work of the attempt tagged ``tag`` (:func:`job_tag`), from any thread
    or a signal handler: the operations a Spark Connect server runs for it (the server keeps
    those of a client that went away running, for a retry to reattach to), or the jobs of a
    local session. Returns the ids of the operations interrupted (empty for a local one)."""
    return list(spark.interruptTag(tag) or [])


def run_task(job: Job, coordinator: Coordinator, epoch_id: int, task_id: str, attempt: int,
             spark: Any, data_uri: str, *, endpoint_url: str | None = None,
             overhead_ms: dict[str, float | None] | None = None,
             complete: bool = True) -> Acknowledgement:
    """Run one attempt of ``job`` under the checkpoint contract (module docstring).

    ``overhead_ms`` is what the caller spent before this call (starting the process,
    opening the Spark session): recorded in the handle's metrics as ``task_overhead_ms``
    (PROTOCOL's timings are a fixed set; metrics are free-form). ``complete``: the
    acknowledgement completes the epoch when it is the last (the coordinator decides)."""
    start = coordinator.register_attempt(epoch_id, task_id, attempt)
    if start.existing is not None:
        log.info("task %s already acknowledged epoch %d (attempt %d): not running again",
                 task_id, epoch_id, start.existing.attempt)
        return start.existing
    t0 = time.monotonic()
    started_at = now_iso(time.time())
    barrier = coordinator.barrier(epoch_id)
    previous = coordinator.restore_handle(epoch_id, task_id)
    upstream = coordinator.upstream_handles(epoch_id, task_id)
    restore_ms = (time.monotonic() - t0) * 1000
    log.info("task %s attempt %d of epoch %d %s", task_id, attempt, epoch_id,
             _restored_from(barrier, previous))
    scratch = Path(tempfile.mkdtemp(prefix=f"ckpt-{task_id}-e{epoch_id}-a{attempt}-"))
    storage = coordinator.task_storage(epoch_id, task_id, attempt)
    writer = storage.writer(previous)
    run = JobRun(barrier, epoch_id, task_id, attempt, spark,
                 open_storage(data_uri, endpoint_url=endpoint_url) if data_uri else None,
                 previous, upstream, writer, scratch, storage, coordinator,
                 listings=coordinator,
                 resume=start.resume if is_connect(spark) else None,
                 table_offsets=dict(previous.table_offsets) if previous else {})
    tag = job_tag(coordinator.pipeline_id, epoch_id, task_id, attempt)
    spark.addTag(tag)
    try:
        t1 = time.monotonic()
        try:
            # Jobs cache DataFrames for the length of one attempt. Spark matches cached
            # data by plan, and a plan over the same file paths matches even when the
            # files changed since: a session that outlives the attempt (embedded runs, a
            # Connect server) would read another attempt's or epoch's rows.
            with attempt_caches():
                result = check_result(job(run), task_id)
        except DeclineEpoch as exc:
            coordinator.decline(epoch_id, task_id, attempt, str(exc))
            raise
        except Exception as exc:
            if is_connect(spark) and (msg := unsupported_feature(exc)):
                raise ConnectUnsupported(f"task {task_id}: {msg}") from None
            missed = missed_rename(exc, run.table_renames)
            if missed is not None:  # the job reads a column its upstream renamed
                coordinator.decline(epoch_id, task_id, attempt, missed)
                raise DeclineEpoch(missed) from None
            raise
        run_ms = (time.monotonic() - t1) * 1000  # includes writing the state files
        handle = writer.handle(
            offsets=result.offsets, row_counts=result.row_counts,
            metrics={**result.metrics, "bytes_referenced": writer.bytes_referenced,
                     "outputs_staged_bytes": writer.outputs_bytes_written,
                     "files_hashed_by_store": writer.hashed_by_store,
                     **({"table_inputs": run.table_reads} if run.table_reads else {}),
                     **({"input_prefixes": sorted(set(run.input_prefixes))}
                        if run.input_prefixes else {}),
                     **({"resumed": {"from_attempt": run.resume.attempt,
                                     "actions": run.resumed}}
                        if run.resumed and run.resume else {}),
                     **({"task_overhead_ms": {k: round(v, 1) for k, v in overhead_ms.items()
                                              if v is not None}} if overhead_ms else {})},
            timings={"started_at": started_at, "restore_ms": round(restore_ms, 1),
                     "run_ms": round(run_ms, 1), "sync_ms": round(run.snapshot_write_ms, 1)},
            restored_from={"epoch_id": previous.epoch_id if previous else None},
            delivery=barrier.mode,
            table_offsets=run.table_offsets,
        )
        try:
            # A leaf's acknowledgement that is the epoch's last completes it (the
            # coordinator decides), so its outputs publish now rather than one
            # orchestrator step later (PROTOCOL 6.5, 1.10).
            ack = coordinator.acknowledge(epoch_id, task_id, attempt, handle,
                                          complete=complete).acknowledgement
        except EpochAlreadyDecided:
            # Decided while the job ran (an operator's abort, a timeout): what the attempt
            # wrote under the epoch is nobody's; leave nothing behind (PROTOCOL 6.11).
            storage.discard()
            raise
        return ack
    finally:
        if run.resume is not None:
            # The killed attempt's session: its cached data, and its operation if this
            # attempt ran the action again instead of resuming it.
            release_session(spark, run.resume.session_id, run.resume.user_id)
        shutil.rmtree(scratch, ignore_errors=True)
        end_of_task(spark, tag)


def end_of_task(spark: Any, tag: str) -> None:
    """Drop the attempt's tag from its session (its cached DataFrames are unpersisted by
    :func:`~spark_jobs.runtime.attempt_cache.attempt_caches` around the job). Never
    raises: a session that is gone (a retry released a fenced attempt's) must not hide
    the error the attempt is ending with."""
    try:
        spark.removeTag(tag)
    except Exception as exc:  # noqa: BLE001 - any Spark or gRPC error of a dead session
        log.info("end of task: session not cleaned (%s)", str(exc).strip().splitlines()[0]
                 if str(exc).strip() else type(exc).__name__)
