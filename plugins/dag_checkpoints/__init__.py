"""DAG-level checkpoints for Airflow: the provider's public API.

Write a DAG of :class:`CheckpointedSparkOperator` tasks (or ``@task.checkpointed_spark``
functions) and :class:`CheckpointedViewOperator` views (or ``@task.checkpointed_view``)
wired with ``>>``, then call :func:`checkpoint_dag` with the DAG's
:class:`CheckpointSettings`: the epoch's plan is derived from the DAG, and the begin step,
the timeout watchdog and the commit step are added around the jobs. Task code reaches
checkpoint storage only through the ``checkpointing`` library; correctness never depends on
listeners."""

from .hooks import CheckpointHook
from .notifications import AlertSettings, announce
from .operators import (
    BeginEpochOperator,
    CheckpointedSparkOperator,
    CheckpointedViewOperator,
    CommitEpochOperator,
    EpochTimeoutOperator,
)
from .shared.assets import published_asset
from .shared.settings import CheckpointSettings
from .shared.timeouts import deadline_alert
from .shared.wiring import CheckpointSteps, checkpoint_dag, derive_plan
from .triggers import EpochDeadlineTrigger

__all__ = ["AlertSettings", "BeginEpochOperator", "CheckpointHook", "CheckpointSettings",
           "CheckpointSteps",
           "CheckpointedSparkOperator", "CheckpointedViewOperator", "CommitEpochOperator",
           "EpochDeadlineTrigger", "EpochTimeoutOperator", "announce", "checkpoint_dag",
           "deadline_alert", "derive_plan", "published_asset"]
