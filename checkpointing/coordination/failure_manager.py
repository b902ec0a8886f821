"""The failure budget and failure records (Flink's ``CheckpointFailureManager``).

Consecutive failed epochs of a lineage are counted in the registry when each decision is
applied; only failures count (``FAILURE_REASONS``), not cancellations (PROTOCOL 6.5). A run
that sees more than ``tolerable_failed_epochs`` fails instead of opening another epoch.
"""

from __future__ import annotations

import logging

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.errors import CheckpointError, FailureBudgetExhausted
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.history import record_failure
from checkpointing.protocol.registry import MAIN

log = logging.getLogger("checkpointing.coordination.failure_manager")


class FailureManager:
    """Counts a lineage's failures against its budget and records each failure."""

    def __init__(self, store: EpochStore, config: CheckpointConfig):
        self.store, self.config = store, config

    def exhausted(self, lineage: str = MAIN) -> bool:
        """True when more consecutive epochs failed than ``tolerable_failed_epochs``."""
        failed = self.store.registry().lineage(lineage).consecutive_failed
        return failed > self.config.tolerable_failed_epochs

    def check(self, lineage: str = MAIN) -> None:
        """Raise :class:`FailureBudgetExhausted` when the budget is spent."""
        failed = self.store.registry().lineage(lineage).consecutive_failed
        if failed > self.config.tolerable_failed_epochs:
            raise FailureBudgetExhausted(
                f"pipeline {self.store.pipeline_id!r} lineage {lineage!r}: {failed} "
                f"consecutive failed epoch(s), tolerable "
                f"{self.config.tolerable_failed_epochs}")

    def record(self, meta: EpochMetadata, barrier: Barrier | None) -> None:
        """Write the failure record of an aborted epoch (PROTOCOL 5.12); when that fails,
        retention writes it later and the abort stands."""
        try:
            record_failure(self.store.storage, self.store.layout, meta, barrier)
        except CheckpointError as exc:
            log.warning("pipeline %s: failure record of epoch %d not written: %s",
                        self.store.pipeline_id, meta.epoch_id, exc)
