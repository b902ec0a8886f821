"""What follows an epoch's decision (PROTOCOL 6.5-6.6), exactly once in effect.

For a completed epoch: commit its table outputs and write its manifest (two-phase commit's
second phase), decide its promotion; for an aborted one: its failure record; for both, the
registry update that closes the epoch and moves its lineage. Every step is idempotent, so a
process that finds a decided epoch still open (its decider died) runs them again safely.
"""

from __future__ import annotations

from dataclasses import replace

from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.failure_manager import FailureManager
from checkpointing.coordination.parent_selector import ParentSelector
from checkpointing.coordination.promotion import PromotionRule
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.epoch_metadata import EpochMetadata, counts_as_failure
from checkpointing.protocol.listener import EpochListener, TableCommitted
from checkpointing.protocol.registry import MAIN, Registry
from checkpointing.protocol.state_handle import OutputRef
from checkpointing.records.two_phase_publish import publish
from checkpointing.tables.commit import commit_tables


class EpochFinisher:
    """Publishes, records and applies the decisions of one pipeline's epochs."""

    def __init__(self, store: EpochStore, promotion: PromotionRule, parents: ParentSelector,
                 failures: FailureManager, listener: EpochListener | None = None):
        self.store, self.promotion = store, promotion
        self.parents, self.failures = parents, failures
        self.listener = listener or EpochListener()

    def finish(self, meta: EpochMetadata, barrier: Barrier | None) -> None:
        """Publish (or record the failure), then update the registry."""
        if meta.completed and barrier is not None and barrier.publish_on_complete:
            self.publish(meta, barrier)
        if not meta.completed:
            self.failures.record(meta, barrier)
        promoted = bool(meta.completed and barrier is not None and barrier.promote and
                        self.promotion.decide(meta, barrier, self.parents.latest(MAIN)))

        def apply(reg: Registry) -> tuple[Registry | None, None]:
            st, main = reg.lineage(meta.lineage), reg.lineage(MAIN)
            decided = reg.open_entry(meta.epoch_id) is None and (
                not meta.completed or (st.latest_completed or 0) >= meta.epoch_id)
            moved = not promoted or (main.latest_completed or 0) >= meta.epoch_id
            if decided and moved:
                return None, None  # applied already
            if not decided:
                reg = reg.with_decision(meta.epoch_id, meta.lineage, meta.completed,
                                        counts=counts_as_failure(meta.reason))
            if not moved:  # the main line continues from this epoch (6.5, 1.4)
                reg = reg.with_lineage(MAIN, replace(reg.lineage(MAIN),
                                                     latest_completed=meta.epoch_id))
            return reg, None

        self.store.update_registry(apply)

    def finish_if_interrupted(self, meta: EpochMetadata) -> None:
        """A decided epoch still open in the registry: its decider died (or failed, e.g. on a
        malformed manifest) before publishing; finish it now, so that a retried commit or a
        resumed run does not report success with nothing published."""
        if self.store.registry().open_entry(meta.epoch_id) is not None:
            self.finish(meta, self.store.barrier_or_none(meta.epoch_id))

    def publish(self, meta: EpochMetadata, barrier: Barrier) -> None:
        """Commit the publishing tasks' outputs: table outputs first (one commit each,
        idempotent by the epoch's transaction), then the manifest, which names the table
        versions (PROTOCOL 6.12)."""
        outputs: dict[str, OutputRef] = {}
        for task, tp in barrier.plan.items():
            if tp.publishes:
                ack = self.store.read_ack(meta.acks[task].key)
                outputs.update(ack.state_handle.outputs)
        storage = self.store.storage
        report: list[TableCommitted] = []
        outputs = commit_tables(self.store.pipeline_id, meta.lineage, meta.epoch_id, outputs,
                                storage.endpoint_url, report)
        if report:
            self.listener.tables_committed(meta, barrier, report)
        publish(storage, self.store.layout, meta.epoch_id, meta.lineage, outputs,
                self.store.clock())
