"""Operators of the checkpoint provider: the checkpointed Spark job, and the begin, commit
and watchdog steps :func:`~dag_checkpoints.checkpoint_dag` adds around the jobs."""

from .epoch import BeginEpochOperator, CommitEpochOperator
from .epoch_timeout import EpochTimeoutOperator
from .spark import CheckpointedSparkOperator

__all__ = ["BeginEpochOperator", "CheckpointedSparkOperator", "CommitEpochOperator",
           "EpochTimeoutOperator"]
