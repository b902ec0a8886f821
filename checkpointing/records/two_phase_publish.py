"""Two-phase publish (Flink's notifyCheckpointComplete for two-phase-commit sinks).

Phase one: tasks stage outputs and reference them in their state handles. Phase two, after
the epoch's ``_metadata`` says completed: the published manifest is replaced by CAS with one
naming the epoch's outputs. Readers resolve the manifest and read only the files it names,
so they never see output of an incomplete epoch. Publishing the same epoch twice, or an
older epoch after a newer one, leaves the manifest alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from checkpointing.json_types import JsonObject
from checkpointing.protocol.cas import cas_update
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.state_handle import FileRef, OutputRef
from checkpointing.storage import Storage

FORMAT = "ckpt.manifest"
_HISTORY = 50


@dataclass(frozen=True)
class PublishedOutput:
    """One published output: its files, and the epoch that produced them."""

    files: tuple[FileRef, ...]
    rows: int | None
    meta: JsonObject
    epoch_id: int

    def to_json(self) -> JsonObject:
        return {"files": [f.to_json() for f in self.files], "rows": self.rows,
                "meta": self.meta, "epoch_id": self.epoch_id}


@dataclass(frozen=True)
class Manifest:
    """The published-manifest document."""

    epoch_id: int
    lineage: str
    published_at: str
    outputs: dict[str, PublishedOutput] = field(default_factory=dict)
    history: tuple[JsonObject, ...] = ()

    def to_bytes(self) -> bytes:
        return CODEC.encode({
            "epoch_id": self.epoch_id, "lineage": self.lineage,
            "published_at": self.published_at,
            "outputs": {k: v.to_json() for k, v in self.outputs.items()},
            "history": list(self.history), "writer": writer_identity(),
        })

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> Manifest:
        return CODEC.decode(data, key)

    def files(self) -> list[FileRef]:
        return [f for o in self.outputs.values() for f in o.files]


def _build(doc: JsonObject, key: str) -> Manifest:
    outputs = {k: PublishedOutput(tuple(FileRef.from_json(f) for f in v["files"]),
                                  v.get("rows"), dict(v.get("meta") or {}), int(v["epoch_id"]))
               for k, v in doc["outputs"].items()}
    return Manifest(int(doc["epoch_id"]), doc["lineage"], doc.get("published_at", ""),
                    outputs, tuple(doc.get("history") or ()))


CODEC = Codec(FORMAT, "manifest", ("epoch_id", "lineage", "outputs"), _build)


def read_manifest(storage: Storage, layout: Layout) -> Manifest | None:
    """The current published manifest, or None before the first publication."""
    data = storage.read_optional(layout.manifest)
    return None if data is None else Manifest.from_bytes(data, storage.uri(layout.manifest))


def table_versions(outputs: Mapping[str, OutputRef | PublishedOutput]) -> dict[str, int]:
    """``{output: table version}`` of the table outputs among ``outputs`` (6.12)."""
    return {name: int(out.meta["table_version"]) for name, out in sorted(outputs.items())
            if "table_version" in (out.meta or {})}


def published_tables(manifest: Manifest | None, epoch_id: int) -> dict[str, int]:
    """The table versions epoch ``epoch_id`` published, while the manifest's history (the
    last 50 publications) remembers it: "epoch 12: gold_route_stats v12"."""
    for entry in (manifest.history if manifest else ()):
        if entry.get("epoch_id") == epoch_id:
            return dict(entry.get("tables") or {})
    return {}


def publish(storage: Storage, layout: Layout, epoch_id: int, lineage: str,
            outputs: dict[str, OutputRef], clock_now: float) -> Manifest:
    """Make ``outputs`` of a completed epoch the published ones (PROTOCOL 6.7): idempotent,
    and forward-only within a lineage. An epoch of another lineage than the published one
    publishes whatever its id (a main epoch completing after a backfill lineage published
    replaces the backfill's outputs, as the lineage rule says)."""
    key = layout.manifest

    def mutate(cur: Manifest | None) -> tuple[bytes | None, Manifest]:
        if cur is not None and (
                (cur.lineage == lineage and cur.epoch_id >= epoch_id)  # this or a newer one
                or any(h.get("epoch_id") == epoch_id for h in cur.history)):  # published once
            return None, cur
        merged = dict(cur.outputs) if cur else {}
        for name, out in outputs.items():
            merged[name] = PublishedOutput(out.files, out.rows, out.meta, epoch_id)
        ts = now_iso(clock_now)
        entry: JsonObject = {"epoch_id": epoch_id, "lineage": lineage, "published_at": ts}
        tables = table_versions(outputs)
        if tables:  # (1.7) the table version each table output got from this epoch
            entry["tables"] = tables
        history = ((cur.history if cur else ()) + (entry,))[-_HISTORY:]
        new = Manifest(epoch_id, lineage, ts, merged, history)
        return new.to_bytes(), new

    return cas_update(storage, key, lambda b: Manifest.from_bytes(b, storage.uri(key)), mutate)
