"""The listing of landed files an epoch reads (PROTOCOL 5.21, 6.16, 1.28).

Flink's file source discovers files in its enumerator and hands each reader its splits, and
the splits discovered before a barrier belong to that checkpoint. Here tasks list a prefix
of their data root themselves, at different moments: without a record, two tasks of one
epoch (or two attempts of one task) would read different files when one lands between
them. So the first attempt of an epoch that lists a prefix records the keys it found
(create-once), and every later attempt of the epoch, of any task, reads from those keys:
a file landing after the listing belongs to the next epoch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from checkpointing.ids import validate_attempt, validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec


def listing_source(root_uri: str, prefix: str) -> str:
    """The id of what a listing lists: the SHA-256 (hex) of the data root's URI and the
    prefix, so that tasks reading the same prefix of the same root share one listing and
    the key names no bucket or path."""
    return hashlib.sha256(f"{root_uri}\n{prefix}".encode()).hexdigest()


@dataclass(frozen=True)
class FileListing:
    """The keys under ``prefix`` (relative to the data root) when attempt ``attempt`` of
    ``task_id`` listed it first in the epoch, at ``listed_at``."""

    prefix: str
    keys: tuple[str, ...]
    task_id: str
    attempt: int
    listed_at: str

    def to_json(self) -> JsonObject:
        return {"prefix": self.prefix, "keys": list(self.keys), "task_id": self.task_id,
                "attempt": self.attempt, "listed_at": self.listed_at}


def _build(doc: JsonObject, key: str) -> FileListing:
    keys = doc["keys"]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("keys is not a list of strings")
    return FileListing(prefix=str(doc["prefix"]), keys=tuple(keys),
                       task_id=validate_id(doc["task_id"], "task id"),
                       attempt=validate_attempt(doc["attempt"]),
                       listed_at=str(doc["listed_at"]))


LISTING = Codec("ckpt.listing", "file listing",
                ("prefix", "keys", "task_id", "attempt", "listed_at", "writer"), _build)
