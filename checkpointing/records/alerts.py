"""Epoch alerts: the record in checkpoint storage of an aborted epoch that someone must
hear about (a timeout above all). Written create-once per epoch, so that however many
processes notice the same abort (the commit step, the epoch's timeout watchdog, a deadline
callback, ``ckpt abort``), exactly one of them delivers the alert (PROTOCOL 5.10). The record
lives in the epoch's history entry, so it outlives the epoch's files (1.3)."""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpointing.errors import PreconditionFailed
from checkpointing.json_types import JsonObject
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import writer_identity
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.layout import Layout
from checkpointing.storage import Storage

FORMAT = "ckpt.alert"


@dataclass(frozen=True)
class EpochAlert:
    """What an alert says: which epoch of which run failed, why, and who did not ack."""

    pipeline_id: str
    epoch_id: int
    lineage: str
    reason: str
    detail: str
    missing_tasks: tuple[str, ...]
    decided_at: str
    run_id: str | None = None
    deadline: str | None = None
    writer: JsonObject = field(default_factory=dict)

    @classmethod
    def from_abort(cls, pipeline_id: str, meta: EpochMetadata,
                   barrier: Barrier | None) -> EpochAlert:
        return cls(pipeline_id, meta.epoch_id, meta.lineage, meta.reason or "aborted",
                   meta.detail or "", tuple(meta.missing_tasks), meta.decided_at,
                   barrier.run_id if barrier else None, barrier.deadline if barrier else None)

    @property
    def title(self) -> str:
        what = "timed out" if self.reason == "timeout" else f"aborted ({self.reason})"
        return f"checkpoint epoch {self.epoch_id} of {self.pipeline_id} {what}"

    def message(self) -> str:
        """One line: the title, the run, the tasks that did not acknowledge, the detail."""
        missing = ", ".join(self.missing_tasks) or "none"
        run = f" run {self.run_id};" if self.run_id else ""
        return f"{self.title}:{run} tasks not acknowledged: {missing}; {self.detail}"

    def to_json(self) -> JsonObject:
        return {"pipeline_id": self.pipeline_id, "epoch_id": self.epoch_id,
                "lineage": self.lineage, "reason": self.reason, "detail": self.detail,
                "missing_tasks": list(self.missing_tasks), "decided_at": self.decided_at,
                "run_id": self.run_id, "deadline": self.deadline, "message": self.message()}

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> EpochAlert:
        return CODEC.decode(data, key)


def _build(d: JsonObject, key: str) -> EpochAlert:
    return EpochAlert(d["pipeline_id"], int(d["epoch_id"]), d["lineage"], d["reason"],
                      d.get("detail", ""), tuple(d["missing_tasks"]), d["decided_at"],
                      d.get("run_id"), d.get("deadline"), d.get("writer") or {})


CODEC = Codec(FORMAT, "alert record", ("pipeline_id", "epoch_id", "lineage", "reason",
                                       "missing_tasks", "decided_at"), _build)


def record_alert(storage: Storage, layout: Layout, alert: EpochAlert) -> bool:
    """Write the epoch's alert record; True when this call wrote it (deliver the alert),
    False when another process already had (stay quiet)."""
    body = {**alert.to_json(), "writer": writer_identity()}
    try:
        storage.create(layout.alert(alert.epoch_id), CODEC.encode(body))
    except PreconditionFailed:
        return False
    return True


def read_alert(storage: Storage, layout: Layout, epoch_id: int) -> EpochAlert | None:
    """The epoch's alert record, also where protocol 1.1-1.2 wrote it."""
    for key in (layout.alert(epoch_id), layout.legacy_alert(epoch_id)):
        data = storage.read_optional(key)
        if data is not None:
            return EpochAlert.from_bytes(data, storage.uri(key))
    return None
