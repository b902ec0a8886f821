"""An embedded driver: one epoch of a pipeline run in-process, what an Airflow DAG does task
by task (begin, each task in dependency order, complete, which publishes). Benchmarks,
tests and the command line use it; a deployment uses the Airflow provider."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Unpack

from checkpointing import Coordinator, EpochMetadata, TaskPlan
from checkpointing.coordination.epoch_begin import BeginOptions
from checkpointing.coordination.lease import RunnerLease

from .job_run import Job, run_task

log = logging.getLogger("spark_jobs.runtime.driver")


@dataclass(frozen=True)
class Pipeline:
    """A pipeline's tasks: ``edges`` (task -> upstream tasks, in a topological order),
    ``jobs`` (task -> job) and the epoch ``plan`` derived from them."""

    edges: dict[str, list[str]]
    jobs: dict[str, Job]
    plan: dict[str, TaskPlan]


def drive_epoch(pipeline: Pipeline, coordinator: Coordinator, spark: Any, data_uri: str,
                run_id: str, *, attempt: int | None = None, stop_after: str | None = None,
                epoch_id: int | None = None, endpoint_url: str | None = None,
                wait_for_driver: float = 0.0,
                **begin: Unpack[BeginOptions]) -> tuple[int, EpochMetadata | None]:
    """Run one epoch for ``run_id``, or resume it.

    A run that already completed its epoch answers with it and runs nothing; a run whose
    epoch is still open (its driver died) resumes that epoch: tasks that acknowledged are not
    run again, the others run as the next attempt (which fences the dead driver's). One
    driver per epoch: this process acquires the epoch's lease first, and a second driver of
    the same run, while the first one's lease is fresh, stops with
    :class:`~checkpointing.errors.EpochDrivenElsewhere` naming it; a resume after the lease
    expired runs above any attempt the dead driver recorded (PROTOCOL 5.13, 1.11). While
    this process drives the epoch it renews the lease, so that another run can abort it as
    ``runner_lost`` if this process dies (PROTOCOL 6.1). ``wait_for_driver``: seconds to wait
    for another live driver's lease to end or expire before refusing. ``stop_after``
    leaves the epoch pending after that task acknowledged, as a crash would."""
    if epoch_id is None:
        lineage = str(begin.get("lineage") or "main")
        done = coordinator.completed_epoch_of_run(run_id, lineage)
        if done is not None:
            log.info("run %s already completed epoch %d: nothing to run", run_id, done)
            return done, coordinator.metadata(done)
        # Two drivers of one run started together share the epoch (the begin joins the
        # run's open one); the lease below lets only one of them drive it.
        epoch_id = coordinator.begin_or_join(pipeline.plan, run_id, **begin).epoch_id
    with RunnerLease(coordinator, epoch_id, attempt=attempt,
                     wait_seconds=wait_for_driver) as lease:
        if lease.attempt is None:  # acquiring the lease chose it
            raise RuntimeError(f"epoch {epoch_id}: the lease was taken without an attempt")
        attempt = lease.attempt
        for task in pipeline.edges:  # insertion order is a topological order
            # A stop after a task is a crash right after its acknowledgement: it must not
            # complete the epoch on that acknowledgement either.
            run_task(pipeline.jobs[task], coordinator, epoch_id, task, attempt, spark, data_uri,
                     endpoint_url=endpoint_url, complete=task != stop_after)
            if task == stop_after:
                return epoch_id, None
        return epoch_id, coordinator.complete(epoch_id)
