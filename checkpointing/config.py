"""Checkpoint configuration, mirroring Flink's CheckpointConfig."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Literal

from checkpointing.json_types import JsonObject

Mode = Literal["exactly_once", "at_least_once"]


@dataclass(frozen=True)
class CheckpointConfig:
    """Policies the coordinator enforces for one pipeline.

    Defaults follow Flink's CheckpointConfig except the timeout: Flink's 10 minutes suits
    streaming checkpoints, whereas one epoch here spans a whole DAG run of Spark jobs.
    """

    #: seconds after the barrier is written before a pending epoch is expired and alerted
    timeout_seconds: float = 3600.0
    #: consecutive aborted epochs tolerated before the run that sees one more fails
    #: (Flink fails the job; default 0): Coordinator.check_failure_budget
    tolerable_failed_epochs: int = 0
    #: pending epochs allowed at once (Flink's default: 1)
    max_concurrent_epochs: int = 1
    #: minimum seconds between the starts of two epochs (Flink's default: 0)
    min_pause_seconds: float = 0.0
    #: completed epochs kept per lineage by retention (Flink's num-retained default: 1)
    retained_epochs: int = 1
    #: delivery guarantee recorded in every barrier
    mode: Mode = "exactly_once"
    #: check size and sha256 of the parent epoch's files before an epoch restores from it;
    #: a corrupt or missing file makes begin fall back to an earlier completed epoch
    verify_restore: bool = True
    #: failed epochs whose record (reason, tasks, attempts, alert) retention keeps after
    #: deleting their files (Flink's web.checkpoints.history default: 10)
    failure_history: int = 10
    #: completed epochs whose summary (figures, per-task metrics, table pins and reads,
    #: table versions) retention keeps after deleting their files (Flink keeps a bounded
    #: history of checkpoint statistics whatever it retains)
    epoch_history: int = 100
    #: an epoch driven by one process (embedded runner, CLI) whose lease was not renewed
    #: this long is aborted as ``runner_lost`` by the next begin that needs its slot
    lease_seconds: float = 60.0
    #: alert once when a lineage's last completed epoch is older than this (Flink's users
    #: alert on ``lastCheckpointAge``); checked at every abort and every begin; None: never
    max_epoch_age_seconds: float | None = None
    #: every this many epochs (by epoch id), each table input's change set is checked
    #: against the difference of the table's content at the two versions, read whole, and
    #: the epoch is declined on a mismatch: a reader bug cannot publish silently. 0: never
    #: (``run.table_changes(name, verify=True)`` checks one read on demand)
    verify_table_inputs_every: int = 0

    def __post_init__(self) -> None:
        if self.timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be > 0")
        if self.tolerable_failed_epochs < 0:
            raise ValueError("tolerable_failed_epochs must be >= 0")
        if self.max_concurrent_epochs < 1:
            raise ValueError("max_concurrent_epochs must be >= 1")
        if self.min_pause_seconds < 0:
            raise ValueError("min_pause_seconds must be >= 0")
        if self.retained_epochs < 1:
            raise ValueError("retained_epochs must be >= 1")
        if self.max_epoch_age_seconds is not None and self.max_epoch_age_seconds <= 0:
            raise ValueError("max_epoch_age_seconds must be > 0 (or None)")
        if self.lease_seconds <= 0:
            raise ValueError("lease_seconds must be > 0")
        if self.failure_history < 0:
            raise ValueError("failure_history must be >= 0")
        if self.epoch_history < 0:
            raise ValueError("epoch_history must be >= 0")
        if self.verify_table_inputs_every < 0:
            raise ValueError("verify_table_inputs_every must be >= 0 (0: never)")
        if self.mode not in ("exactly_once", "at_least_once"):
            raise ValueError("mode must be 'exactly_once' or 'at_least_once'")

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonObject) -> CheckpointConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
