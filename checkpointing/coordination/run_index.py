"""Which epochs a DAG run opened (PROTOCOL 5.14): the run index a begin writes, so that a
cleared or retried run finds its epoch instead of opening a second one, and a run that
completed its epoch is not run again.
"""

from __future__ import annotations

import logging

from checkpointing.coordination.epoch_finisher import EpochFinisher
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.errors import EpochNotFound, PreconditionFailed, StorageError
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.markers import RUN_INDEX
from checkpointing.protocol.registry import MAIN

log = logging.getLogger("checkpointing.coordination.coordinator")


class RunIndex:
    """The epochs of each DAG run of one pipeline."""

    def __init__(self, store: EpochStore, finisher: EpochFinisher):
        self.store, self.finisher = store, finisher

    def record(self, barrier: Barrier) -> None:
        """Record that the barrier's run opened this epoch (PROTOCOL 5.14); an index entry
        lost to a crash only costs a later lookup of the run, never correctness."""
        key = self.store.layout.run_index_entry(barrier.lineage, barrier.run_id, barrier.epoch_id)
        body = {"run_id": barrier.run_id, "epoch_id": barrier.epoch_id,
                "lineage": barrier.lineage}
        try:
            self.store.storage.create(key, RUN_INDEX.encode(body))
        except PreconditionFailed:
            pass
        except StorageError as exc:
            log.warning("pipeline %s: run index of epoch %d not written: %s",
                        self.store.pipeline_id, barrier.epoch_id, exc)

    def epochs_of_run(self, run_id: str, lineage: str = MAIN) -> list[int]:
        """The epochs ``run_id`` opened in ``lineage``, ascending (one listing)."""
        prefix = self.store.layout.run_index_prefix(lineage, str(run_id))
        ids = [o.key[len(prefix):] for o in self.store.storage.list(prefix)]
        return sorted(int(i) for i in ids if len(i) == 10 and i.isdigit())

    def completed_epoch_of_run(self, run_id: str, lineage: str = MAIN) -> int | None:
        """The epoch ``run_id`` completed, if it did (its newest epoch, when completed)."""
        ids = self.epochs_of_run(run_id, lineage)
        if not ids:
            return None
        meta = self.store.metadata(ids[-1])
        if meta is None or not meta.completed:
            return None
        self.finisher.finish_if_interrupted(meta)  # completed but never published: publish now
        return ids[-1]

    def open_epoch_for_run(self, run_id: str, lineage: str = MAIN) -> Barrier | None:
        """The undecided epoch a DAG run already opened, if any (so that a cleared or
        retried begin step reuses it instead of opening a second epoch)."""
        for entry in self.store.registry().open:
            if entry.lineage != lineage or self.store.metadata(entry.epoch_id) is not None:
                continue
            try:
                barrier = self.store.barrier(entry.epoch_id)
            except EpochNotFound:
                continue
            if barrier.run_id == run_id:
                return barrier
        return None
