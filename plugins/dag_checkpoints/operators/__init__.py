"""Operators of the checkpoint provider: the checkpointed Spark job, the incremental view,
and the begin, commit and watchdog steps :func:`~dag_checkpoints.checkpoint_dag` adds
around the jobs."""

from .epoch import BeginEpochOperator, CommitEpochOperator
from .epoch_timeout import EpochTimeoutOperator
from .spark import CheckpointedSparkOperator
from .view import CheckpointedViewOperator

__all__ = ["BeginEpochOperator", "CheckpointedSparkOperator", "CheckpointedViewOperator",
           "CommitEpochOperator", "EpochTimeoutOperator"]
