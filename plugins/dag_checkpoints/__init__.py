"""DAG-level checkpoints for Airflow: the provider's public API.

Write a DAG of :class:`CheckpointedSparkOperator` tasks (or ``@task.checkpointed_spark``
functions) and :class:`CheckpointedViewOperator` views (or ``@task.checkpointed_view``)
wired with ``>>``, then call :func:`checkpoint_dag` with the DAG's
:class:`CheckpointSettings`: the epoch's plan is derived from the DAG, and the begin step,
the timeout watchdog and the commit step are added around the jobs. Task code reaches
checkpoint storage only through the ``checkpointing`` library; correctness never depends on
listeners.

The names are imported when first used (PEP 562), not with the package: every Airflow
process imports ``dag_checkpoints.provider`` while it reads its configuration (the
provider's entry point), and the scheduler, the API server, the triggerer and every
``airflow`` command would otherwise import the operators, the view planner and sqlglot
with it (``import airflow``: 1.7 CPU-s against 1.9)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Each public name and the module that defines it.
_HOMES = {
    "AlertSettings": ".notifications.epoch_alert",
    "announce": ".notifications.epoch_alert",
    "BeginEpochOperator": ".operators.epoch",
    "CommitEpochOperator": ".operators.epoch",
    "CheckpointedSparkOperator": ".operators.spark",
    "CheckpointedViewOperator": ".operators.view",
    "EpochTimeoutOperator": ".operators.epoch_timeout",
    "CheckpointHook": ".hooks.checkpoint",
    "CheckpointSettings": ".shared.settings",
    "CheckpointSteps": ".shared.wiring",
    "checkpoint_dag": ".shared.wiring",
    "derive_plan": ".shared.wiring",
    "deadline_alert": ".shared.timeouts",
    "published_asset": ".shared.assets",
    "EpochDeadlineTrigger": ".triggers.epoch_deadline",
}

__all__ = ["AlertSettings", "BeginEpochOperator", "CheckpointHook", "CheckpointSettings",
           "CheckpointSteps",
           "CheckpointedSparkOperator", "CheckpointedViewOperator", "CommitEpochOperator",
           "EpochDeadlineTrigger", "EpochTimeoutOperator", "announce", "checkpoint_dag",
           "deadline_alert", "derive_plan", "published_asset"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value  # the next lookup is an ordinary one
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
