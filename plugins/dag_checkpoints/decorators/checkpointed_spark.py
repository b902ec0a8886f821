"""``@task.checkpointed_spark``: a TaskFlow task that is a checkpointed Spark job, in the
family of the Spark provider's ``@task.pyspark``.

The decorated function receives the :class:`spark_jobs.runtime.JobRun` (its ``spark`` is the
session) and returns a :class:`spark_jobs.runtime.JobResult`; calling it inside the DAG
creates the task. State flows through the checkpoint (restored handles), not XCom::

    @task.checkpointed_spark(outputs=["gold_sessions"])
    def sessionize(run):
        ...
        return JobResult(row_counts={"sessions": n})

The function must be defined at module level (workers import it by reference).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from ..operators.spark import CheckpointedSparkOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class _CheckpointedSparkDecoratedOperator(DecoratedOperator, CheckpointedSparkOperator):
    custom_operator_name = "@task.checkpointed_spark"
    strict_reference = False  # local mode calls the function itself

    def __init__(self, *, python_callable: Callable[..., Any], op_args: Any = None,
                 op_kwargs: Any = None, **kwargs: Any) -> None:
        if op_args or op_kwargs:
            raise TypeError(f"@task.checkpointed_spark function {python_callable.__name__} "
                            "takes no arguments in the DAG: its inputs come from the epoch's "
                            "restored state and upstream handles (JobRun)")
        # Its one parameter (the JobRun) is supplied when the task runs, as @task.pyspark
        # does for its session: give it a default so that the call in the DAG binds.
        sig = inspect.signature(python_callable)
        python_callable.__signature__ = sig.replace(parameters=[  # type: ignore[attr-defined]
            p.replace(default=None) for p in sig.parameters.values()])
        super().__init__(python_callable=python_callable, op_args=op_args, op_kwargs=op_kwargs,
                         kwargs_to_upstream={"job": python_callable}, **kwargs)

    def execute(self, context: Context) -> Any:
        return CheckpointedSparkOperator.execute(self, context)

    def job_callable(self) -> Callable[..., Any]:
        return self.python_callable


def checkpointed_spark_task(python_callable: Callable[..., Any] | None = None,
                            **kwargs: Any) -> TaskDecorator:
    """The ``@task.checkpointed_spark`` decorator (options: those of
    :class:`CheckpointedSparkOperator` except ``job``: ``outputs``, ``publishes``,
    ``settings``, ``application``, and BaseOperator's)."""
    return task_decorator_factory(python_callable=python_callable, multiple_outputs=False,
                                  decorated_operator_class=_CheckpointedSparkDecoratedOperator,
                                  **kwargs)
