"""Documents that are created once and then only listed (PROTOCOL 5.3, 5.5, 5.14): an
attempt's registration, a task's decline and a run's index entry. Readers act on their
presence and key; their fields are there for people and tools reading storage, so their
codecs build nothing beyond the checked fields."""

from __future__ import annotations

from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec


def _fields(doc: JsonObject, key: str) -> JsonObject:
    return doc


ATTEMPT_START = Codec("ckpt.attempt", "attempt registration",
                      ("task_id", "attempt", "started_at"), _fields)
DECLINE = Codec("ckpt.decline", "decline", ("task_id", "attempt", "reason", "declined_at"),
                _fields)
RUN_INDEX = Codec("ckpt.run", "run index entry", ("run_id", "epoch_id", "lineage"), _fields)
