"""The staleness alert: a lineage whose last completed epoch is older than the configured
``max_epoch_age_seconds`` (Flink's users alert on ``lastCheckpointAge``). One record per
stale period, create-once at ``lineages/<lineage>/stale-after-<epoch>.json`` keyed by that
last completed epoch (PROTOCOL 5.18, 1.13), so that however many processes notice (every
abort, every begin), exactly one alerts; a newer completed epoch ends the period, and the
next stale one has a key of its own."""

from __future__ import annotations

from dataclasses import dataclass

from checkpointing.errors import PreconditionFailed
from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.registry import MAIN
from checkpointing.storage import Storage


@dataclass(frozen=True)
class StaleAlert:
    """What a staleness alert says: which lineage, its last completed epoch and its age."""

    pipeline_id: str
    lineage: str
    last_epoch_id: int
    last_completed_at: str
    age_seconds: float
    max_age_seconds: float
    detected_at: str

    @property
    def title(self) -> str:
        return (f"no checkpoint epoch of {self.pipeline_id} completed for "
                f"{_duration(self.age_seconds)}")

    def message(self) -> str:
        """One line: the title, the last completed epoch, the configured age."""
        line = "" if self.lineage == MAIN else f" (lineage {self.lineage})"
        return (f"{self.title}{line}: the last completed epoch is {self.last_epoch_id}, "
                f"decided at {self.last_completed_at}; alert age "
                f"{_duration(self.max_age_seconds)}")

    def to_json(self) -> JsonObject:
        return {"pipeline_id": self.pipeline_id, "lineage": self.lineage,
                "last_epoch_id": self.last_epoch_id,
                "last_completed_at": self.last_completed_at,
                "age_seconds": round(self.age_seconds, 3),
                "max_age_seconds": self.max_age_seconds, "detected_at": self.detected_at,
                "message": self.message()}

    def document(self) -> JsonObject:
        return {**self.to_json(), "writer": writer_identity()}


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


def _build(d: JsonObject, key: str) -> StaleAlert:
    return StaleAlert(str(d["pipeline_id"]), str(d["lineage"]), int(d["last_epoch_id"]),
                      str(d["last_completed_at"]), float(d["age_seconds"]),
                      float(d["max_age_seconds"]), str(d["detected_at"]))


CODEC = Codec("ckpt.stale-alert", "staleness alert",
              ("pipeline_id", "lineage", "last_epoch_id", "last_completed_at", "age_seconds",
               "max_age_seconds", "detected_at"), _build)


def stale(pipeline_id: str, lineage: str, last_epoch_id: int, last_completed_at: str,
          decided_ts: float, now: float, max_age: float) -> StaleAlert | None:
    """The alert due when the last completed epoch is older than ``max_age`` at ``now``;
    None when it is not."""
    if now - decided_ts <= max_age:
        return None
    return StaleAlert(pipeline_id, lineage, last_epoch_id, last_completed_at,
                      now - decided_ts, max_age, now_iso(now))


@dataclass(frozen=True)
class StaleResolved:
    """The end of a stale period (PROTOCOL 5.18, 1.17): an epoch of the lineage completed
    again after its staleness alert. Recorded once, beside the alert it ends."""

    pipeline_id: str
    lineage: str
    stale_after_epoch_id: int
    completed_epoch_id: int
    completed_at: str
    detected_at: str

    @property
    def title(self) -> str:
        return f"checkpoint epochs of {self.pipeline_id} complete again"

    def message(self) -> str:
        line = "" if self.lineage == MAIN else f" (lineage {self.lineage})"
        return (f"{self.title}{line}: epoch {self.completed_epoch_id} completed at "
                f"{self.completed_at}, after the staleness alert on epoch "
                f"{self.stale_after_epoch_id}")

    def to_json(self) -> JsonObject:
        return {"pipeline_id": self.pipeline_id, "lineage": self.lineage,
                "stale_after_epoch_id": self.stale_after_epoch_id,
                "completed_epoch_id": self.completed_epoch_id,
                "completed_at": self.completed_at, "detected_at": self.detected_at,
                "message": self.message(), "resolved": True}

    def document(self) -> JsonObject:
        return {**self.to_json(), "writer": writer_identity()}


def _build_resolved(d: JsonObject, key: str) -> StaleResolved:
    return StaleResolved(str(d["pipeline_id"]), str(d["lineage"]),
                         int(d["stale_after_epoch_id"]), int(d["completed_epoch_id"]),
                         str(d["completed_at"]), str(d["detected_at"]))


RESOLVED_CODEC = Codec("ckpt.stale-resolved", "end of a stale period",
                       ("pipeline_id", "lineage", "stale_after_epoch_id",
                        "completed_epoch_id", "completed_at", "detected_at"), _build_resolved)


def record_resolved(storage: Storage, layout: Layout, resolved: StaleResolved) -> bool:
    """Write the end of a stale period; True when this call wrote it (deliver the notice),
    False when another process already had."""
    try:
        storage.create(layout.stale_resolved(resolved.lineage, resolved.stale_after_epoch_id),
                       RESOLVED_CODEC.encode(resolved.document()))
    except PreconditionFailed:
        return False
    return True


def record_stale_alert(storage: Storage, layout: Layout, alert: StaleAlert) -> bool:
    """Write the stale period's record; True when this call wrote it (deliver the alert),
    False when another process already had (stay quiet)."""
    try:
        storage.create(layout.stale_alert(alert.lineage, alert.last_epoch_id),
                       CODEC.encode(alert.document()))
    except PreconditionFailed:
        return False
    return True
