"""A task's acknowledgement of an epoch (Flink's AcknowledgeCheckpoint)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.state_handle import StateHandle

FORMAT = "ckpt.ack"


@dataclass(frozen=True)
class Acknowledgement:
    """An acknowledgement as stored: the attempt, when, and the state handle."""

    task_id: str
    attempt: int
    acked_at: str
    state_handle: StateHandle
    writer: JsonObject = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"task_id": self.task_id, "attempt": self.attempt, "acked_at": self.acked_at,
                "state_handle": self.state_handle.to_json(), "writer": self.writer}

    def to_bytes(self) -> bytes:
        return CODEC.encode(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> Acknowledgement:
        return CODEC.decode(data, key)


def _build(d: JsonObject, key: str) -> Acknowledgement:
    return Acknowledgement(d["task_id"], int(d["attempt"]), d["acked_at"],
                           StateHandle.from_json(d["state_handle"], key), d.get("writer", {}))


#: Also the codec of the acknowledgements a savepoint embeds.
CODEC = Codec(FORMAT, "acknowledgement", ("task_id", "attempt", "acked_at", "state_handle"),
              _build)


class AckStatus(enum.Enum):
    """What an acknowledgement did (Flink's ``TaskAcknowledgeResult``). A task not in the
    plan (UNKNOWN) and an epoch already decided (DISCARDED) are refused by raising
    :class:`~checkpointing.errors.UnknownTask` and
    :class:`~checkpointing.errors.EpochAlreadyDecided`: the attempt must stop there."""

    #: recorded now
    SUCCESS = "success"
    #: this attempt had acknowledged already (a repeat, or a concurrent twin): the first
    #: acknowledgement stays and is returned
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class AckResult:
    """The outcome of :meth:`checkpointing.Coordinator.acknowledge`: the stored
    acknowledgement, and the epoch's decision when this acknowledgement was the last one
    and completed it (None otherwise)."""

    status: AckStatus
    acknowledgement: Acknowledgement
    completed: EpochMetadata | None = None
