"""Make any DAG checkpointed: the epoch's plan is derived from the DAG itself.

Write the DAG as usual, with :class:`~dag_checkpoints.operators.CheckpointedSparkOperator` or
``@task.checkpointed_spark`` tasks wired with ``>>``, then call :func:`checkpoint_dag`. The
checkpointed tasks and their Airflow upstreams are the plan (tasks that must acknowledge and
their upstream edges, through any plain task between two checkpointed ones), so there is no
second list to drift; the begin step, the epoch's timeout watchdog and the commit step are
added beside them. The root jobs begin or join the run's epoch themselves, so they start
with the begin step, not one scheduler loop after it (:mod:`dag_checkpoints.task.task_epoch`);
the last leaf job's acknowledgement completes the epoch, and the commit step, deferred
beside the jobs, emits the asset events then (or completes or aborts the epoch once the
jobs are done), so it is no level after them either::

    jobs (as wired)        begin ──► checkpoint_commit, checkpoint_timeout (deferred)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from checkpointing import TaskPlan
from checkpointing.protocol.barrier import plan_table_inputs

from ..operators import BeginEpochOperator, CommitEpochOperator, EpochTimeoutOperator
from .assets import published_assets
from .runconf import BEGIN_TASK_ID, COMMIT_TASK_ID, TIMEOUT_TASK_ID
from .settings import CheckpointSettings


def is_checkpointed(task: Any) -> bool:
    return bool(getattr(task, "is_checkpointed", False))


def checkpointed_upstream(task: Any) -> list[str]:
    """The task ids of ``task``'s nearest checkpointed upstream tasks (through plain ones)."""
    found, stack, seen = set(), list(task.upstream_list), set()
    while stack:
        u = stack.pop()
        if u.task_id in seen:
            continue
        seen.add(u.task_id)
        if getattr(u, "is_checkpointed", False):
            found.add(u.task_id)
        else:
            stack.extend(u.upstream_list)
    return sorted(found)


def derive_plan(tasks: list[Any]) -> dict[str, TaskPlan]:
    """The epoch plan of checkpointed ``tasks``: each task's nearest checkpointed ancestors
    are its upstream edges (a plain task between two checkpointed ones is walked through)."""
    plan = {t.task_id: TaskPlan(tuple(checkpointed_upstream(t)),
                                bool(getattr(t, "publishes", False)),
                                dict(getattr(t, "table_inputs", None) or {}),
                                getattr(t, "view_task", None)) for t in tasks}
    plan_table_inputs(plan)  # one table per input name across the DAG
    return plan


#: (storage, pipeline id) -> the DAG that claimed it in this process
_CLAIMS: dict[tuple[str, str], str] = {}


def _claim_pipeline(dag_id: str, settings: CheckpointSettings) -> None:
    """Refuse, when the DAG is defined, a pipeline id another DAG of this process already
    uses on the same storage (two DAGs of one file, a copied DAG that kept its settings).
    DAGs parsed by other processes are refused by their first begin step, which finds the
    pipeline's owner in the registry."""
    key = (settings.storage.rstrip("/"), settings.pipeline_id)
    other = _CLAIMS.setdefault(key, dag_id)
    if other != dag_id:
        raise ValueError(f"DAG {dag_id!r}: pipeline id {settings.pipeline_id!r} is already "
                         f"used by DAG {other!r} on the same checkpoint storage; give "
                         "CheckpointSettings(pipeline_id=...) a value of its own")


@dataclass(frozen=True)
class CheckpointSteps:
    """What :func:`checkpoint_dag` added, and the plan it derived."""

    begin: Any
    commit: Any
    watchdog: Any
    plan: dict[str, TaskPlan]


def _expects_tables(task: Any) -> bool:
    return any(s.expect_new_version for s in getattr(task, "table_inputs", {}).values())


def checkpoint_dag(dag: Any, settings: CheckpointSettings, *,
                   allow_non_restored_state: bool = False) -> CheckpointSteps:
    """Add the checkpoint steps around the checkpointed tasks of ``dag`` (call it last, once
    the tasks are wired). Checkpointed tasks without settings get ``settings``.

    :param allow_non_restored_state: begin even when the parent epoch holds state of a task
        the DAG no longer has (that state is dropped), as Flink's flag of the same name.
    """
    _claim_pipeline(dag.dag_id, settings)
    settings = replace(settings, dag_id=dag.dag_id)  # the metrics' dag_id tag
    jobs = [t for t in dag.tasks if is_checkpointed(t)]
    if not jobs:
        raise ValueError(f"DAG {dag.dag_id!r} has no checkpointed task: use "
                         "CheckpointedSparkOperator or @task.checkpointed_spark")
    plan = derive_plan(jobs)
    for t in jobs:
        if t.settings is None:
            t.settings = settings
        elif t.settings.dag_id is None:
            t.settings = replace(t.settings, dag_id=dag.dag_id)
        grace, timeout = getattr(t, "input_grace", 0), t.settings.config.timeout_seconds
        if (getattr(t, "expects", ()) or _expects_tables(t)) and grace >= timeout:
            raise ValueError(f"task {t.task_id!r}: input_grace ({grace:.0f} s) must be shorter "
                             f"than the checkpoint timeout ({timeout:.0f} s), which would "
                             "abort the epoch first")
        t.epoch_plan, t.allow_non_restored_state = plan, allow_non_restored_state
    begin = BeginEpochOperator(task_id=BEGIN_TASK_ID, settings=settings, plan=plan,
                               allow_non_restored_state=allow_non_restored_state, dag=dag)
    # Whoever begins the epoch (the begin step or a root job) pins the table versions, so
    # each of them waits for the new versions the plan expects, as long as its longest grace.
    table_grace = max((t.input_grace for t in jobs if _expects_tables(t)), default=0.0)
    for step in (begin, *jobs):
        step.table_input_grace = table_grace
    commit = CommitEpochOperator(task_id=COMMIT_TASK_ID, settings=settings, dag=dag,
                                 job_task_ids=sorted(plan),
                                 outlets=published_assets(settings, jobs))
    watchdog = EpochTimeoutOperator(task_id=TIMEOUT_TASK_ID, settings=settings,
                                    begin_task_id=BEGIN_TASK_ID, commit_task_id=COMMIT_TASK_ID,
                                    dag=dag)
    # Both wait beside the jobs, deferred, for the epoch's decision (the last leaf job's
    # acknowledgement completes it): neither is a level after the jobs, and the jobs do
    # not wait for the begin step either, since the roots begin or join the epoch too.
    begin >> [watchdog, commit]
    return CheckpointSteps(begin, commit, watchdog, plan)
