"""Triggers of the checkpoint provider (run in Airflow's triggerer)."""

from .epoch_commit import EpochCommitTrigger
from .epoch_deadline import EpochDeadlineTrigger
from .expected_input import ExpectedInputTrigger, TableVersionTrigger

__all__ = ["EpochCommitTrigger", "EpochDeadlineTrigger", "ExpectedInputTrigger",
           "TableVersionTrigger"]
