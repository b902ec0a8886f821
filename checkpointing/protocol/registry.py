"""The coordinator registry ``counter.json``: epoch id counter, open epochs and the
per-lineage latest pointer (Flink's CheckpointIDCounter plus the completed-checkpoint store's
head), updated only by compare-and-swap."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec

FORMAT = "ckpt.registry"
#: the lineage of scheduled runs; a backfill from a checkpoint starts another (PROTOCOL 5.15)
MAIN = "main"


@dataclass(frozen=True)
class OpenEpoch:
    """An epoch allocated and not yet known to be decided."""

    epoch_id: int
    lineage: str
    created_at: str
    deadline: str
    #: the run that allocated it (1.2): lets that run's next try reclaim an id its crashed
    #: try allocated without writing the barrier
    run_id: str | None = None


@dataclass(frozen=True)
class LineageState:
    latest_completed: int | None = None
    consecutive_failed: int = 0
    last_started_at: str | None = None


@dataclass(frozen=True)
class Registry:
    last_epoch_id: int = 0
    open: tuple[OpenEpoch, ...] = ()
    lineages: dict[str, LineageState] = field(default_factory=dict)
    #: (1.7) the DAG (or other driver) whose epochs these are, set by its first begin:
    #: another DAG configured with the same pipeline id on the same storage is refused
    owner: str | None = None

    def lineage(self, name: str) -> LineageState:
        return self.lineages.get(name, LineageState())

    def open_entry(self, epoch_id: int) -> OpenEpoch | None:
        return next((o for o in self.open if o.epoch_id == epoch_id), None)

    def with_lineage(self, name: str, state: LineageState) -> Registry:
        return replace(self, lineages={**self.lineages, name: state})

    def with_decision(self, epoch_id: int, lineage: str, completed: bool,
                      counts: bool = True) -> Registry:
        """The registry after applying an epoch's decision (PROTOCOL 6.5, step 2).
        ``counts``: an abort that spends the failure budget (not a cancellation)."""
        reg = replace(self, open=tuple(o for o in self.open if o.epoch_id != epoch_id))
        st = reg.lineage(lineage)
        if completed:
            latest = max(st.latest_completed or 0, epoch_id)
            st = replace(st, latest_completed=latest, consecutive_failed=0)
        elif counts:
            st = replace(st, consecutive_failed=st.consecutive_failed + 1)
        return reg.with_lineage(lineage, st)

    def decided(self, epoch_id: int) -> bool:
        """Whether ``epoch_id`` was allocated and is no longer open: every such id was
        decided (a burned id is open until it expires, and expiry decides it)."""
        return 0 < epoch_id <= self.last_epoch_id and self.open_entry(epoch_id) is None

    def to_bytes(self, writer: JsonObject, updated_at: str) -> bytes:
        return CODEC.encode({
            "last_epoch_id": self.last_epoch_id,
            "open": [{"epoch_id": o.epoch_id, "lineage": o.lineage,
                      "created_at": o.created_at, "deadline": o.deadline,
                      **({"run_id": o.run_id} if o.run_id is not None else {})}
                     for o in self.open],
            "lineages": {n: {"latest_completed": s.latest_completed,
                             "consecutive_failed": s.consecutive_failed,
                             "last_started_at": s.last_started_at}
                         for n, s in self.lineages.items()},
            **({"owner": self.owner} if self.owner is not None else {}),
            "updated_at": updated_at, "writer": writer,
        })

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> Registry:
        return CODEC.decode(data, key)


def _build(doc: JsonObject, key: str) -> Registry:
    return Registry(
        int(doc["last_epoch_id"]),
        tuple(OpenEpoch(int(o["epoch_id"]), o["lineage"], o["created_at"], o["deadline"],
                        o.get("run_id"))
              for o in doc["open"]),
        {n: LineageState(s.get("latest_completed"), int(s.get("consecutive_failed", 0)),
                         s.get("last_started_at"))
         for n, s in doc["lineages"].items()},
        doc.get("owner"),
    )


CODEC = Codec(FORMAT, "registry", ("last_epoch_id", "open", "lineages"), _build)
