"""The operation record (PROTOCOL 5.17, 1.9): which engine operation an attempt started
last, so that its next attempt can wait for it instead of running it again (6.3).

The library knows nothing of the engine: the ids are opaque strings the job runtime
records and reads back (a Spark Connect session and operation)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from checkpointing.ids import validate_attempt, validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec


@dataclass(frozen=True)
class EngineOperation:
    """One long action an attempt started on an engine that outlives its client."""

    task_id: str
    attempt: int
    #: ``<kind>:<name>`` of the job's action (``state:bronze``, ``table:gold``)
    action: str
    engine: str
    session_id: str
    operation_id: str
    started_at: str
    user_id: str | None = None
    #: names of the observations the action computes, in the job's order
    observations: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> JsonObject:
        body = asdict(self)
        body["observations"] = list(self.observations)
        return {k: v for k, v in body.items() if v not in (None, [])}


def _build(doc: JsonObject, key: str) -> EngineOperation:
    return EngineOperation(
        task_id=validate_id(doc["task_id"], "task id"),
        attempt=validate_attempt(doc["attempt"]), action=str(doc["action"]),
        engine=str(doc["engine"]), session_id=str(doc["session_id"]),
        operation_id=str(doc["operation_id"]), started_at=str(doc["started_at"]),
        user_id=None if doc.get("user_id") is None else str(doc["user_id"]),
        observations=tuple(str(o) for o in doc.get("observations") or ()))


OPERATION = Codec("ckpt.operation", "operation record",
                  ("task_id", "attempt", "action", "engine", "session_id", "operation_id",
                   "started_at"), _build)
