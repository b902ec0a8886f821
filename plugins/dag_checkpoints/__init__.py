"""Airflow side of DAG-level checkpoints: settings, operators and the checkpointed-DAG
helper. Task code reaches checkpoint storage only through the ``checkpointing`` library;
correctness never depends on listeners."""

from .alerts import AlertSettings, announce, deadline_alert
from .operators import BeginEpochOperator, CheckpointedJobOperator, CommitEpochOperator
from .settings import CheckpointSettings
from .wiring import checkpointed_pipeline

__all__ = ["AlertSettings", "BeginEpochOperator", "CheckpointSettings", "CheckpointedJobOperator",
           "CommitEpochOperator", "announce", "checkpointed_pipeline", "deadline_alert"]
