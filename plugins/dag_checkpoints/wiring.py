"""``checkpointed_pipeline``: turns a set of jobs and their edges into a checkpointed DAG:
begin -> jobs (with their edges) -> commit, visible in the grid."""

from __future__ import annotations

from checkpointing import plan_from_edges

from .operators import (
    BEGIN_TASK_ID,
    COMMIT_TASK_ID,
    BeginEpochOperator,
    CheckpointedJobOperator,
    CheckpointedSparkSubmitOperator,
    CommitEpochOperator,
)
from .settings import CheckpointSettings


def checkpointed_pipeline(settings: CheckpointSettings, edges: dict[str, list[str]],
                          publishing: set[str]) -> dict[str, object]:
    """Create the operators inside the current DAG context; returns them by task id.
    Task ids are the job names, which are also the epoch plan's task ids."""
    plan = plan_from_edges(edges, publishing)
    begin = BeginEpochOperator(task_id=BEGIN_TASK_ID, settings=settings, plan=plan)
    commit = CommitEpochOperator(task_id=COMMIT_TASK_ID, settings=settings)
    job_op = (CheckpointedSparkSubmitOperator if settings.spark_mode == "submit"
              else CheckpointedJobOperator)
    ops = {name: job_op(task_id=name, job=name, settings=settings) for name in edges}
    for name, ups in edges.items():
        if ups:
            for up in ups:
                ops[up] >> ops[name]
        else:
            begin >> ops[name]
        ops[name] >> commit
    return {BEGIN_TASK_ID: begin, COMMIT_TASK_ID: commit, **ops}
