"""A task with checkpointing disabled: the same job, without the checkpoint protocol.

What a run with checkpointing disabled does (a documented switch: the run conf
``{"checkpoint": {"enabled": false}}``), as Flink with checkpointing off runs the same
operators without barriers or snapshots:

- no epoch: nothing is written under the pipeline's ``epochs/``, ``counter.json``,
  ``published/`` or ``runs/`` (no barrier, attempt record, acknowledgement, decision);
- each task restores, read-only, the state of the lineage's latest completed epoch (a run
  far from any checkpoint therefore recomputes everything since), and reads its upstream
  tasks' state of *this run* from the handles they passed on (Airflow XComs);
- files are written where Spark writes them (``<pipeline>/unchecked/<run>/``), never hashed
  or deduplicated; the run's begin step deletes earlier unchecked runs' files;
- table outputs are committed to their tables by the task that wrote them, one commit per
  output and task, with no epoch to wait for: no exactly-once across tasks, no retry
  fencing, no failure budget, no timeout. Other outputs are not published.

It exists to measure what checkpointing costs (``airflow_checkpoint_overhead_ratio``) and
to run a pipeline once without touching its checkpoints."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from checkpointing import Coordinator, StateHandle
from checkpointing.protocol.barrier import Barrier, TaskPlan
from checkpointing.protocol.documents import now_iso
from checkpointing.protocol.table_inputs import TableInput, TableInputError
from checkpointing.protocol.view_task import ViewTask
from checkpointing.storage import open_storage
from checkpointing.tables.commit import commit_tables

from .attempt_cache import attempt_caches
from .errors import DeclineEpoch
from .job_run import Job, JobRun, check_result, end_of_task, job_tag
from .run_context import NoOperationLog

log = logging.getLogger("spark_jobs.runtime.unchecked")
LINEAGE = "unchecked"


def unchecked_barrier(coordinator: Coordinator, run_id: str, task_id: str, epoch_id: int,
                      parent: int | None, interval: dict[str, str] | None,
                      table_inputs: Mapping[str, TableInput],
                      view: ViewTask | None = None) -> Barrier:
    """The barrier a task of an unchecked run reads, written nowhere: the run's data
    interval and the latest completed epoch as its parent, and the task's table inputs
    pinned now, at their newest versions (the task's own pin: there is no epoch across
    the run's tasks to share one). An input that cannot be pinned fails the task in one
    line, as it refuses a checked epoch's begin."""
    try:  # as the coordinator pins a checked epoch's inputs
        plan, versions = coordinator.pin_table_inputs(
            {task_id: TaskPlan(table_inputs=dict(table_inputs), view=view)})
    except TableInputError as exc:
        raise DeclineEpoch(str(exc)) from None
    now = now_iso(time.time())
    return Barrier(pipeline_id=coordinator.pipeline_id, epoch_id=epoch_id, run_id=run_id,
                   lineage=LINEAGE, plan=plan, created_at=now, deadline=now,
                   config=coordinator.config, mode=coordinator.config.mode,
                   data_interval=interval, parent_epoch_id=parent,
                   publish_on_complete=False, table_versions=versions)


def latest_state(coordinator: Coordinator) -> tuple[int | None, dict[str, StateHandle]]:
    """(epoch id, handles) of the main line's latest completed epoch, read only."""
    latest = coordinator.latest_completed()
    return latest, (coordinator.completed_handles(latest) if latest else {})


def run_unchecked_task(job: Job, coordinator: Coordinator, run_id: str, task_id: str,
                       spark: Any, data_uri: str, upstream: dict[str, StateHandle],
                       interval: dict[str, str] | None, *,
                       table_inputs: Mapping[str, TableInput] | None = None,
                       view: ViewTask | None = None,
                       endpoint_url: str | None = None) -> StateHandle:
    """Run ``job`` once with checkpointing disabled (module docstring) and return its
    handle, for the run's downstream tasks; its table outputs are committed already.
    ``table_inputs``: the task's upstream tables, read from the versions the restored
    state consumed up to their newest (``run.table_changes`` and ``run.table_snapshot``
    work as in a checked epoch). ``view``: a view task's view, in its plan as in a checked
    epoch's."""
    parent, handles = latest_state(coordinator)
    previous = handles.get(task_id)
    # An epoch id for the attempt's table directories and the tables' transaction: the
    # clock in seconds, increasing from one unchecked run to the next.
    epoch_id = int(time.time())
    barrier = unchecked_barrier(coordinator, run_id, task_id, epoch_id, parent, interval,
                                table_inputs or {}, view)
    storage = coordinator.unchecked_run(run_id).task_storage(task_id, epoch_id)
    writer = storage.writer(previous, shared=False, digests=False)
    scratch = Path(tempfile.mkdtemp(prefix=f"ckpt-unchecked-{task_id}-"))
    run = JobRun(barrier, epoch_id, task_id, 1, spark,
                 open_storage(data_uri, endpoint_url=endpoint_url) if data_uri else None,
                 previous, upstream, writer, scratch, storage, NoOperationLog(),
                 table_offsets=dict(previous.table_offsets) if previous else {})
    tag = job_tag(coordinator.pipeline_id, epoch_id, task_id, 1)
    spark.addTag(tag)
    log.info("task %s runs with checkpointing disabled, from %s", task_id,
             f"epoch {parent}'s state" if previous else "empty state")
    started = now_iso(time.time())
    t0 = time.monotonic()
    try:
        with attempt_caches():
            result = check_result(job(run), task_id)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        end_of_task(spark, tag)
    handle = writer.handle(offsets=result.offsets, row_counts=result.row_counts,
                           metrics=dict(result.metrics),
                           timings={"started_at": started,
                                    "run_ms": round((time.monotonic() - t0) * 1000, 1),
                                    "sync_ms": round(run.snapshot_write_ms, 1)},
                           restored_from={"epoch_id": parent if previous else None},
                           table_offsets=run.table_offsets)
    tables = {n: o for n, o in handle.outputs.items() if "table" in o.meta}
    if tables:
        commit_tables(coordinator.pipeline_id, LINEAGE, epoch_id, tables,
                      endpoint_url=endpoint_url)
    return handle
