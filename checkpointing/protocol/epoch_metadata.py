"""The epoch's outcome document ``_metadata``: completed (Flink's CompletedCheckpoint) or
aborted. Exactly one per epoch, written create-once."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.registry import MAIN

FORMAT = "ckpt.epoch-metadata"


class AbortReason(enum.StrEnum):
    """Why an epoch was aborted (``_metadata.reason``; Flink's CheckpointFailureReason). A
    ``str``: documents hold the value, and a reason compares equal to it."""

    #: past its deadline (the checkpoint canceller)
    TIMEOUT = "timeout"
    #: a task declined it (bad input) or failed without acknowledging
    DECLINED = "declined"
    #: its outputs failed validation
    VALIDATION_FAILED = "validation_failed"
    #: another epoch (a promoted backfill) took its place
    SUPERSEDED = "superseded"
    #: an operator aborted it
    CANCELLED = "cancelled"
    #: its single driver stopped renewing its lease
    RUNNER_LOST = "runner_lost"

    @property
    def counts_as_failure(self) -> bool:
        """Whether it spends the failure budget (``tolerable_failed_epochs``), as Flink's
        CheckpointFailureManager counts declined, expired and failed checkpoints but not
        cancellations: an operator's abort, an epoch superseded by another and a lost
        runner (a job failover, which Airflow's retries handle) neither count nor reset
        the count (PROTOCOL 6.5). The one place this rule lives."""
        return self in (AbortReason.TIMEOUT, AbortReason.DECLINED,
                        AbortReason.VALIDATION_FAILED)


ABORT_REASONS = tuple(r.value for r in AbortReason)
FAILURE_REASONS = tuple(r.value for r in AbortReason if r.counts_as_failure)


def counts_as_failure(reason: str | None) -> bool:
    """Whether an abort with ``reason`` spends the failure budget (PROTOCOL 6.5)."""
    return reason in ABORT_REASONS and AbortReason(reason).counts_as_failure


@dataclass(frozen=True)
class AckRef:
    """Where a completed epoch's effective acknowledgement of one task is stored."""

    attempt: int
    key: str
    acked_at: str


@dataclass(frozen=True)
class EpochMetadata:
    """The decided outcome of one epoch."""

    epoch_id: int
    lineage: str
    status: Literal["completed", "aborted"]
    decided_at: str
    acks: dict[str, AckRef] = field(default_factory=dict)
    reason: str | None = None
    detail: str | None = None
    missing_tasks: tuple[str, ...] = ()
    declined_by: str | None = None
    writer: JsonObject = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def to_bytes(self) -> bytes:
        body: JsonObject = {
            "epoch_id": self.epoch_id, "lineage": self.lineage, "status": self.status,
            "decided_at": self.decided_at, "writer": self.writer,
        }
        if self.completed:
            body["acks"] = {t: {"attempt": a.attempt, "key": a.key, "acked_at": a.acked_at}
                            for t, a in self.acks.items()}
        else:
            body.update(reason=self.reason, detail=self.detail,
                        missing_tasks=list(self.missing_tasks), declined_by=self.declined_by)
        return CODEC.encode(body)

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> EpochMetadata:
        return CODEC.decode(data, key)


def _build(doc: JsonObject, key: str) -> EpochMetadata:
    status = doc["status"]
    if status not in ("completed", "aborted"):
        raise ValueError(f"unknown status {status!r}")
    acks = {t: AckRef(int(a["attempt"]), a["key"], a["acked_at"])
            for t, a in (doc.get("acks") or {}).items()}
    return EpochMetadata(int(doc["epoch_id"]), doc.get("lineage", MAIN), status,
                         doc["decided_at"], acks, doc.get("reason"), doc.get("detail"),
                         tuple(doc.get("missing_tasks") or ()), doc.get("declined_by"),
                         doc.get("writer", {}))


CODEC = Codec(FORMAT, "epoch metadata", ("epoch_id", "status", "decided_at"), _build)
