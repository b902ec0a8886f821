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

import hashlib
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpointing import Coordinator, SnapshotWriter, StateHandle
from checkpointing.documents import now_iso
from checkpointing.layout import Layout
from checkpointing.storage import Storage, open_storage
from checkpointing.table_commit import commit_tables

from .job_run import Job, JobRun, end_of_task, job_tag

log = logging.getLogger("spark_jobs.runtime.unchecked")
LINEAGE = "unchecked"


def run_key(run_id: str) -> str:
    """The directory name of one run's files (run ids hold characters keys must not)."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class UncheckedLayout(Layout):
    """The pipeline's keys, but an attempt's state and staging prefixes are the run's
    scratch: ``<pipeline>/unchecked/<run>/{state,staging}/<task>/``."""

    run: str = ""

    @property
    def unchecked_prefix(self) -> str:
        return f"{self.base}unchecked/"

    def state_prefix(self, epoch_id: int, task_id: str, attempt: int) -> str:
        return f"{self.unchecked_prefix}{self.run}/state/{task_id}/"

    def staging_prefix(self, epoch_id: int, task_id: str, attempt: int) -> str:
        return f"{self.unchecked_prefix}{self.run}/staging/{task_id}/"


@dataclass(frozen=True)
class _Barrier:
    """What a job and the runtime read of an epoch's barrier."""

    data_interval: dict[str, str] | None
    parent_epoch_id: int | None
    parent_savepoint: str | None = None
    mode: str = LINEAGE


@dataclass
class UncheckedCoordinator:
    """What a job asks of its coordinator, with no epoch behind it: storage, the run's
    scratch layout and the run's data interval."""

    storage: Storage
    layout: UncheckedLayout
    interval: dict[str, str] | None
    parent_epoch_id: int | None
    pipeline_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.pipeline_id = self.layout.pipeline_id

    def barrier(self, epoch_id: int) -> _Barrier:
        return _Barrier(self.interval, self.parent_epoch_id)

    def record_operation(self, epoch_id: int, op: Any) -> None:
        """Nothing: no epoch, so no later attempt resumes this run's operations."""


def latest_state(coordinator: Coordinator) -> tuple[int | None, dict[str, StateHandle]]:
    """(epoch id, handles) of the main line's latest completed epoch, read only."""
    latest = coordinator.latest_completed()
    return latest, (coordinator.completed_handles(latest) if latest else {})


def clear_earlier_runs(storage: Storage, pipeline_id: str, run_id: str) -> int:
    """Delete what earlier unchecked runs of the pipeline left in their scratch; returns
    the objects deleted."""
    layout = UncheckedLayout(pipeline_id, run=run_key(run_id))
    mine = f"{layout.unchecked_prefix}{layout.run}/"
    n = 0
    for obj in list(storage.list(layout.unchecked_prefix)):
        if not obj.key.startswith(mine):
            storage.delete(obj.key)
            n += 1
    return n


def run_unchecked_task(job: Job, coordinator: Coordinator, run_id: str, task_id: str,
                       spark: Any, data_uri: str, upstream: dict[str, StateHandle],
                       interval: dict[str, str] | None, *,
                       endpoint_url: str | None = None) -> StateHandle:
    """Run ``job`` once with checkpointing disabled (module docstring) and return its
    handle, for the run's downstream tasks; its table outputs are committed already."""
    parent, handles = latest_state(coordinator)
    previous = handles.get(task_id)
    # An epoch id for the attempt's table directories and the tables' transaction: the
    # clock in seconds, increasing from one unchecked run to the next.
    epoch_id = int(time.time())
    unchecked = UncheckedCoordinator(coordinator.storage,
                                     UncheckedLayout(coordinator.pipeline_id, run=run_key(run_id)),
                                     interval, parent)
    writer = SnapshotWriter(coordinator.storage, unchecked.layout, epoch_id, task_id, 1,
                            previous=previous, shared=False, digests=False)
    scratch = Path(tempfile.mkdtemp(prefix=f"ckpt-unchecked-{task_id}-"))
    run = JobRun(unchecked, epoch_id, task_id, 1, spark,  # type: ignore[arg-type]
                 open_storage(data_uri, endpoint_url=endpoint_url) if data_uri else None,
                 previous, upstream, writer, scratch)
    tag = job_tag(coordinator.pipeline_id, epoch_id, task_id, 1)
    spark.addTag(tag)
    log.info("task %s runs with checkpointing disabled, from %s", task_id,
             f"epoch {parent}'s state" if previous else "empty state")
    started = now_iso(time.time())
    t0 = time.monotonic()
    try:
        result = job(run)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        end_of_task(spark, tag)
    handle = writer.handle(offsets=result.offsets, row_counts=result.row_counts,
                           metrics=dict(result.metrics),
                           timings={"started_at": started,
                                    "run_ms": round((time.monotonic() - t0) * 1000, 1),
                                    "sync_ms": round(run.snapshot_write_ms, 1)},
                           restored_from={"epoch_id": parent if previous else None})
    tables = {n: o for n, o in handle.outputs.items() if "table" in o.meta}
    if tables:
        commit_tables(coordinator.pipeline_id, LINEAGE, epoch_id, tables,
                      endpoint_url=endpoint_url)
    return handle
