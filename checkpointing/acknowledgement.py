"""A task's acknowledgement of an epoch (Flink's AcknowledgeCheckpoint)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .documents import decode, encode
from .errors import MalformedDocument
from .state_handle import StateHandle

FORMAT = "ckpt.ack"


@dataclass(frozen=True)
class Acknowledgement:
    """An acknowledgement as stored: the attempt, when, and the state handle."""

    task_id: str
    attempt: int
    acked_at: str
    state_handle: StateHandle
    writer: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return encode(FORMAT, {"task_id": self.task_id, "attempt": self.attempt,
                               "acked_at": self.acked_at,
                               "state_handle": self.state_handle.to_json(),
                               "writer": self.writer})

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> Acknowledgement:
        doc = decode(data, FORMAT, key, ("task_id", "attempt", "acked_at", "state_handle"))
        try:
            return cls(doc["task_id"], int(doc["attempt"]), doc["acked_at"],
                       StateHandle.from_json(doc["state_handle"], key), doc.get("writer", {}))
        except (TypeError, ValueError) as exc:
            raise MalformedDocument(f"malformed acknowledgement at {key}: {exc!r}") from None
