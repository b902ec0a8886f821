"""The documents of one pipeline's epochs as the coordinator reads and writes them.

The registry (read, and updated by compare-and-swap), barriers and decided ``_metadata``
(immutable once written, so cached), acknowledgements, and the decision of an epoch read
from what survives retention (PROTOCOL 6.11). Flink keeps the same split between the
coordinator's logic and its ``CompletedCheckpointStore``. Retention calls :meth:`forget`
for the epochs it deletes; nothing else touches the caches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from checkpointing.errors import (
    CheckpointError,
    EpochAlreadyDecided,
    EpochNotFound,
    EpochNotKept,
    NotFound,
    PreconditionFailed,
    StorageError,
)
from checkpointing.ids import validate_epoch_id
from checkpointing.protocol.acknowledgement import Acknowledgement
from checkpointing.protocol.attempts import scan_epoch_tasks
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.cas import cas_update
from checkpointing.protocol.decision import Decision
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.history import read_failure
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.registry import MAIN, Registry
from checkpointing.protocol.state_handle import StateHandle
from checkpointing.storage import Storage

R = TypeVar("R")


class EpochStore:
    """Reads and writes one pipeline's epoch documents; caches the immutable ones."""

    def __init__(self, storage: Storage, layout: Layout, clock: Callable[[], float]):
        self.storage, self.layout, self.clock = storage, layout, clock
        self._barriers: dict[int, Barrier] = {}
        self._decided: dict[int, EpochMetadata] = {}

    @property
    def pipeline_id(self) -> str:
        return self.layout.pipeline_id

    def uri(self, key: str) -> str:
        return self.storage.uri(key)

    # ------------------------------------------------------------------ registry
    def registry(self) -> Registry:
        """The current registry (an empty one before the first epoch)."""
        try:
            data, _ = self.storage.read(self.layout.counter)
        except NotFound:
            return Registry()
        return Registry.from_bytes(data, self.uri(self.layout.counter))

    def update_registry(self, mutate: Callable[[Registry], tuple[Registry | None, R]]) -> R:
        """Apply ``mutate`` by compare-and-swap; it returns (new registry or None for no
        change, result); the result of the winning application is returned."""
        key = self.layout.counter

        def parse(b: bytes) -> Registry:
            return Registry.from_bytes(b, self.uri(key))

        def step(cur: Registry | None) -> tuple[bytes | None, R]:
            new, result = mutate(cur if cur is not None else self._bootstrap_registry())
            if new is None:
                return None, result
            return new.to_bytes(writer_identity(), now_iso(self.clock())), result

        return cas_update(self.storage, key, parse, step)

    def _bootstrap_registry(self) -> Registry:
        """An absent registry with epochs present (deleted by hand) must not reuse ids."""
        return Registry(last_epoch_id=max(self.epoch_ids() or [0]))

    def epoch_ids(self) -> list[int]:
        """Ids of every epoch that has a directory in storage, ascending."""
        ids = [self.layout.parse_epoch_dir(p)
               for p in self.storage.list_dirs(self.layout.epochs_prefix)]
        return sorted(i for i in ids if i)

    # ------------------------------------------------------------------ barriers
    def barrier(self, epoch_id: int) -> Barrier:
        """The epoch's barrier (cached: barriers are immutable)."""
        epoch_id = validate_epoch_id(epoch_id)
        if epoch_id not in self._barriers:
            key = self.layout.barrier(epoch_id)
            try:
                data, _ = self.storage.read(key)
            except NotFound:
                # No storage path in the message: it reaches API answers and task logs.
                if 0 < epoch_id <= self.registry().last_epoch_id and not any(
                        True for _ in self.storage.list(self.layout.epoch_prefix(epoch_id))):
                    raise EpochNotKept(
                        f"epoch {epoch_id} of pipeline {self.pipeline_id!r} is not kept: "
                        "retention deleted its files (or its begin never wrote a barrier)"
                    ) from None
                raise EpochNotFound(
                    f"epoch {epoch_id} of pipeline {self.pipeline_id!r} does not exist "
                    "(it has no barrier)") from None
            self._barriers[epoch_id] = Barrier.from_bytes(data, self.uri(key))
        return self._barriers[epoch_id]

    def barrier_cached(self, epoch_id: int) -> bool:
        return epoch_id in self._barriers

    def barrier_or_none(self, epoch_id: int) -> Barrier | None:
        """The barrier, or None for an id burned by a crash before its barrier was written."""
        try:
            return self.barrier(epoch_id)
        except EpochNotFound:
            return None

    def create_barrier(self, barrier: Barrier) -> None:
        """Write a new barrier; PreconditionFailed when one exists."""
        self.storage.create(self.layout.barrier(barrier.epoch_id), barrier.to_bytes())
        self._barriers[barrier.epoch_id] = barrier

    def reread_barrier(self, epoch_id: int) -> Barrier:
        self._barriers.pop(epoch_id, None)
        return self.barrier(epoch_id)

    # ------------------------------------------------------------------ decisions
    def metadata(self, epoch_id: int) -> EpochMetadata | None:
        """The epoch's decided outcome, or None while it is pending."""
        epoch_id = validate_epoch_id(epoch_id)
        if epoch_id in self._decided:
            return self._decided[epoch_id]
        key = self.layout.metadata(epoch_id)
        try:
            data, _ = self.storage.read(key)
        except NotFound:
            return None
        meta = EpochMetadata.from_bytes(data, self.uri(key))
        self._decided[epoch_id] = meta
        return meta

    def write_decision(self, meta: EpochMetadata) -> tuple[EpochMetadata, bool]:
        """Create ``_metadata``; return (the winning metadata, whether it is ours)."""
        key = self.layout.metadata(meta.epoch_id)
        try:
            self.storage.create(key, meta.to_bytes())
        except PreconditionFailed:
            self._decided.pop(meta.epoch_id, None)
            winner = self.metadata(meta.epoch_id)
            if winner is None:  # pragma: no cover - create lost but nothing there
                raise StorageError(
                    f"lost the write of {self.uri(key)} but cannot read it") from None
            return winner, False
        self._decided[meta.epoch_id] = meta
        return meta, True

    def decision(self, epoch_id: int, *, metadata_absent: bool = False,
                 barrier_read: bool = False) -> Decision | None:
        """How the epoch ended, read from what survives retention (PROTOCOL 6.11): its
        ``_metadata``, else its failure record, else the registry; None while it is pending.
        Raises :class:`EpochNotFound` for an id never allocated.

        ``metadata_absent``: the caller has just found no ``_metadata`` (not read again).
        ``barrier_read``: the caller has just read the barrier from storage, not from the
        cache (its existence is not checked again)."""
        epoch_id = validate_epoch_id(epoch_id)
        meta = None if metadata_absent else self.metadata(epoch_id)
        if meta is not None:
            return Decision.of_metadata(meta)
        # Retention deletes the barrier before _metadata: a barrier still there after
        # _metadata was absent means the epoch was pending when _metadata was read.
        if barrier_read or self.storage.exists(self.layout.barrier(epoch_id)):
            return None
        rec = read_failure(self.storage, self.layout, epoch_id)
        if rec is not None:
            return Decision.of_failure(rec)
        reg = self.registry()
        if reg.decided(epoch_id):
            return Decision.forgotten(epoch_id)
        if reg.open_entry(epoch_id) is not None:
            return None  # allocated, its barrier not written yet (or never: a burned id)
        raise EpochNotFound(f"epoch {epoch_id} of pipeline {self.pipeline_id!r} does not "
                            "exist")

    def decided_metadata(self, epoch_id: int) -> EpochMetadata | None:
        """The decision as ``_metadata`` (from the failure record once retention deleted
        it), None while pending; EpochAlreadyDecided when only the registry remembers the
        epoch, so that nothing writes a second decision into a deleted epoch."""
        decision = self.decision(epoch_id)
        if decision is None:
            return None
        meta = decision.as_metadata()
        if meta is None:
            raise EpochAlreadyDecided(decision.describe())
        return meta

    def latest_completed(self, lineage: str = MAIN, reg: Registry | None = None) -> int | None:
        """The lineage's latest completed epoch: 1 + |open| reads, whatever the history
        (the registry's pointer, or a newer open epoch decided but not yet applied)."""
        reg = reg or self.registry()
        best = reg.lineage(lineage).latest_completed
        for entry in reg.open:
            if entry.lineage != lineage or entry.epoch_id <= (best or 0):
                continue
            meta = self.metadata(entry.epoch_id)
            if meta is not None and meta.completed:
                best = entry.epoch_id
        return best

    def completed_handles(self, epoch_id: int) -> dict[str, StateHandle]:
        """Every task's state handle of a completed epoch."""
        meta = self.metadata(epoch_id)
        if meta is None or not meta.completed:
            raise CheckpointError(f"epoch {epoch_id} is not completed")
        return {t: self.read_ack(a.key).state_handle for t, a in meta.acks.items()}

    def next_attempt(self, epoch_id: int) -> int:
        """One more than the highest attempt of any task in the epoch: the attempt number a
        driver that resumes the epoch uses, fencing whatever ran before it."""
        tasks = scan_epoch_tasks(self.storage, self.layout, epoch_id)
        return 1 + max((ta.highest for ta in tasks.values()), default=0)

    # ------------------------------------------------------------------ acknowledgements
    def read_ack(self, key: str) -> Acknowledgement:
        data, _ = self.storage.read(key)
        return Acknowledgement.from_bytes(data, self.uri(key))

    def forget(self, epoch_id: int) -> None:
        """Drop the cached documents of an epoch retention deleted."""
        self._decided.pop(epoch_id, None)
        self._barriers.pop(epoch_id, None)
