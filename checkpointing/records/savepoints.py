"""Savepoints: named, user-triggered, self-contained copies of a completed epoch's
barrier and acknowledgements. Never deleted by retention."""

from __future__ import annotations

from dataclasses import dataclass

from checkpointing.errors import (
    CheckpointError,
    NotFound,
    PreconditionFailed,
    SavepointExists,
    SavepointNotFound,
)
from checkpointing.ids import validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.acknowledgement import CODEC as ACK_CODEC
from checkpointing.protocol.acknowledgement import Acknowledgement
from checkpointing.protocol.barrier import CODEC as BARRIER_CODEC
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.epoch_reader import EpochReader
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.registry import MAIN
from checkpointing.protocol.state_handle import StateHandle
from checkpointing.storage import Storage

FORMAT = "ckpt.savepoint"


@dataclass(frozen=True)
class Savepoint:
    name: str
    epoch_id: int
    lineage: str
    created_at: str
    barrier: Barrier
    acks: dict[str, Acknowledgement]

    def handles(self) -> dict[str, StateHandle]:
        return {t: a.state_handle for t, a in self.acks.items()}


def _build(d: JsonObject, key: str) -> Savepoint:
    # The embedded barrier and acknowledgements are read by their own documents' codecs.
    acks = {t: ACK_CODEC.parse(a, key) for t, a in d["acks"].items()}
    return Savepoint(d["name"], int(d["epoch_id"]), d.get("lineage", MAIN),
                     d.get("created_at", ""), BARRIER_CODEC.parse(d["barrier"], key), acks)


CODEC = Codec(FORMAT, "savepoint", ("name", "epoch_id", "barrier", "acks"), _build)


def create_savepoint(epochs: EpochReader, name: str, epoch_id: int | None = None) -> Savepoint:
    """Copy a completed epoch (default: the latest of ``main``) into a named savepoint."""
    validate_id(name, "savepoint name")
    storage, layout = epochs.storage, epochs.layout
    if epoch_id is None:
        epoch_id = epochs.latest_completed(MAIN)
        if epoch_id is None:
            raise CheckpointError("no completed epoch to take a savepoint of")
    meta = epochs.metadata(epoch_id)
    if meta is None or not meta.completed:
        raise CheckpointError(f"epoch {epoch_id} is not completed; savepoints need a completed "
                              "epoch")
    barrier = epochs.barrier(epoch_id)
    acks = {t: epochs.read_ack(ref.key) for t, ref in meta.acks.items()}
    created = now_iso(epochs.clock())
    body = {"name": name, "epoch_id": epoch_id, "lineage": meta.lineage, "created_at": created,
            "barrier": barrier.to_json(), "acks": {t: a.to_json() for t, a in acks.items()},
            "writer": writer_identity()}
    try:
        storage.create(layout.savepoint(name), CODEC.encode(body))
    except PreconditionFailed:
        raise SavepointExists(f"savepoint {name!r} exists already") from None
    return Savepoint(name, epoch_id, meta.lineage, created, barrier, acks)


def read_savepoint(storage: Storage, layout: Layout, name: str) -> Savepoint:
    key = layout.savepoint(name)
    try:
        data, _ = storage.read(key)
    except NotFound:
        raise SavepointNotFound(f"savepoint {name!r} does not exist") from None
    return CODEC.decode(data, storage.uri(key))


def list_savepoints(storage: Storage, layout: Layout) -> list[Savepoint]:
    out = []
    for info in storage.list(layout.savepoints_prefix):
        name = info.key[len(layout.savepoints_prefix):]
        if name.endswith(".json") and "/" not in name:
            out.append(read_savepoint(storage, layout, name[: -len(".json")]))
    return sorted(out, key=lambda s: (s.created_at, s.name))


def delete_savepoint(storage: Storage, layout: Layout, name: str) -> None:
    """Delete the savepoint document; its files become collectable by retention."""
    key = layout.savepoint(name)
    if not storage.exists(key):
        raise SavepointNotFound(f"savepoint {name!r} does not exist")
    storage.delete(key)
