"""Lineages: a backfill from an epoch or a savepoint starts a new chain of epochs. Its
origin record says where the chain starts and what it replays, so that every epoch of the
chain can be traced back (PROTOCOL 5.11); its promotion record says whether its last epoch
became the main line's (5.15)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from checkpointing.errors import CheckpointError, PreconditionFailed
from checkpointing.ids import validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.registry import MAIN
from checkpointing.storage import Storage

T = TypeVar("T")

FORMAT = "ckpt.lineage"
PROMOTION_FORMAT = "ckpt.promotion"


class LineageExists(CheckpointError):
    """A lineage name is taken: lineages are never reused."""


@dataclass(frozen=True)
class LineageOrigin:
    """Where a lineage starts: ``from_epoch`` or ``from_savepoint`` (exactly one), and the
    logical-date range it replays; ``publish_at`` is the run whose epoch publishes."""

    lineage: str
    from_epoch: int | None
    from_savepoint: str | None
    start: str
    end: str
    created_at: str
    publish_at: str | None = None
    requested_by: str | None = None
    writer: JsonObject = field(default_factory=dict)
    #: (1.4) the lineage's last epoch continues the main line when it completes
    promote: bool = False

    def __post_init__(self) -> None:
        validate_id(self.lineage, "lineage")
        if self.lineage == MAIN:
            raise ValueError("the main lineage has no origin record")
        if (self.from_epoch is None) == (self.from_savepoint is None):
            raise ValueError("a lineage starts from exactly one of an epoch or a savepoint")

    def to_json(self) -> JsonObject:
        return {"lineage": self.lineage, "from_epoch": self.from_epoch,
                "from_savepoint": self.from_savepoint, "start": self.start, "end": self.end,
                "created_at": self.created_at, "publish_at": self.publish_at,
                "requested_by": self.requested_by, "promote": self.promote}

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> LineageOrigin:
        return ORIGIN_CODEC.decode(data, key)


def _build_origin(d: JsonObject, key: str) -> LineageOrigin:
    # ValueError from the dataclass: an invalid name, neither or both origins
    return LineageOrigin(d["lineage"], d.get("from_epoch"), d.get("from_savepoint"), d["start"],
                         d["end"], d["created_at"], d.get("publish_at"), d.get("requested_by"),
                         d.get("writer") or {}, bool(d.get("promote", False)))


ORIGIN_CODEC = Codec(FORMAT, "lineage origin", ("lineage", "start", "end", "created_at"),
                     _build_origin)


def new_origin(lineage: str, start: str, end: str, clock: float, *,
               from_epoch: int | None = None, from_savepoint: str | None = None,
               publish_at: str | None = None, requested_by: str | None = None,
               promote: bool = False) -> LineageOrigin:
    return LineageOrigin(lineage, from_epoch, from_savepoint, start, end, now_iso(clock),
                         publish_at, requested_by, promote=promote)


def record_origin(storage: Storage, layout: Layout, origin: LineageOrigin) -> None:
    """Create the lineage's origin record; a taken name raises :class:`LineageExists`."""
    try:
        storage.create(layout.lineage_origin(origin.lineage),
                       ORIGIN_CODEC.encode({**origin.to_json(), "writer": writer_identity()}))
    except PreconditionFailed:
        raise LineageExists(f"lineage {origin.lineage!r} already exists") from None


def delete_origin(storage: Storage, layout: Layout, lineage: str) -> None:
    """Remove a lineage's origin record: only for a backfill that never started (Airflow
    refused it), so that nothing of a refused request stays behind."""
    storage.delete(layout.lineage_origin(lineage))


def _read_optional(storage: Storage, key: str, parse: Callable[[bytes, str], T]) -> T | None:
    data = storage.read_optional(key)
    return None if data is None else parse(data, storage.uri(key))


def read_origin(storage: Storage, layout: Layout, lineage: str) -> LineageOrigin | None:
    """The origin of ``lineage`` (None for ``main`` or an unknown lineage)."""
    if lineage == MAIN:
        return None
    return _read_optional(storage, layout.lineage_origin(lineage), LineageOrigin.from_bytes)


def list_origins(storage: Storage, layout: Layout,
                 undecided_only: bool = False) -> list[LineageOrigin]:
    """Every recorded lineage origin, oldest name first; with ``undecided_only``, only those
    without a promotion record (one listing tells, no read of the others)."""
    keys = [info.key for info in storage.list(f"{layout.base}lineages/")]
    decided = {k.removesuffix("promotion.json") for k in keys if k.endswith("/promotion.json")}
    out = []
    for key in keys:
        if key.endswith("/origin.json") and not (
                undecided_only and key.removesuffix("origin.json") in decided):
            data, _ = storage.read(key)
            out.append(LineageOrigin.from_bytes(data, storage.uri(key)))
    return out


@dataclass(frozen=True)
class Promotion:
    """What happened when a promoting lineage's last epoch completed (PROTOCOL 5.15):
    ``promoted`` when its input reached the main line's, which then continues from it;
    ``superseded`` is main's latest completed epoch before (still there, restorable)."""

    lineage: str
    epoch_id: int
    promoted: bool
    superseded: int | None
    input_until: str | None
    main_input_until: str | None
    decided_at: str

    def to_json(self) -> JsonObject:
        return {"lineage": self.lineage, "epoch_id": self.epoch_id, "promoted": self.promoted,
                "superseded": self.superseded, "input_until": self.input_until,
                "main_input_until": self.main_input_until, "decided_at": self.decided_at}

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> Promotion:
        return PROMOTION_CODEC.decode(data, key)


def _build_promotion(d: JsonObject, key: str) -> Promotion:
    return Promotion(d["lineage"], int(d["epoch_id"]), bool(d["promoted"]), d.get("superseded"),
                     d.get("input_until"), d.get("main_input_until"), d.get("decided_at", ""))


PROMOTION_CODEC = Codec(PROMOTION_FORMAT, "promotion record", ("lineage", "epoch_id", "promoted"),
                        _build_promotion)


def record_promotion(storage: Storage, layout: Layout, promotion: Promotion) -> Promotion:
    """Create the promotion record once; a record already there (another decider, or a
    retried finish) wins and is returned."""
    key = layout.lineage_promotion(promotion.lineage)
    try:
        storage.create(key, PROMOTION_CODEC.encode({**promotion.to_json(),
                                                    "writer": writer_identity()}))
        return promotion
    except PreconditionFailed:
        data, _ = storage.read(key)
        return Promotion.from_bytes(data, storage.uri(key))


def read_promotion(storage: Storage, layout: Layout, lineage: str) -> Promotion | None:
    if lineage == MAIN:
        return None
    return _read_optional(storage, layout.lineage_promotion(lineage), Promotion.from_bytes)
