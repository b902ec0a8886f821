"""An epoch's decision as every reader sees it, for as long as anything can ask (PROTOCOL
6.11): the ``_metadata`` document while the epoch's files exist, then the failure record
that outlives an aborted epoch, then the registry, which knows every id it allocated.

Retention deletes decided epochs; without this a deleted epoch read as "pending" (no
``_metadata``) or "unknown" (no barrier), so a watchdog waited for its deadline and a late
acknowledgement wrote files into it. A decided epoch stays decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.history import FailureRecord


@dataclass(frozen=True)
class Decision:
    """How an epoch ended: ``completed``, ``aborted``, or ``decided`` when only the
    registry remembers it (its files and its failure record are gone)."""

    epoch_id: int
    status: str
    #: where it was read from: ``metadata``, ``history`` or ``registry``
    source: str
    reason: str | None = None
    detail: str | None = None
    lineage: str | None = None
    #: the ``_metadata`` document while it exists
    metadata: EpochMetadata | None = None
    #: the failure record, once it is the source
    failure: FailureRecord | None = None

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @classmethod
    def of_metadata(cls, meta: EpochMetadata) -> Decision:
        return cls(meta.epoch_id, meta.status, "metadata", meta.reason, meta.detail,
                   meta.lineage, meta)

    @classmethod
    def of_failure(cls, rec: FailureRecord) -> Decision:
        return cls(rec.epoch_id, "aborted", "history", rec.reason, rec.detail, rec.lineage,
                   failure=rec)

    @classmethod
    def forgotten(cls, epoch_id: int) -> Decision:
        return cls(epoch_id, "decided", "registry",
                   detail="its files and failure record were deleted by retention")

    def as_metadata(self) -> EpochMetadata | None:
        """The decision as an ``_metadata`` document, from the failure record once the
        document is deleted; None when only the registry remembers the epoch."""
        if self.metadata is not None:
            return self.metadata
        rec = self.failure
        if rec is None:
            return None
        return EpochMetadata(rec.epoch_id, rec.lineage, "aborted", rec.decided_at,
                             reason=rec.reason, detail=rec.detail,
                             missing_tasks=rec.missing_tasks, declined_by=rec.declined_by)

    def describe(self) -> str:
        """``epoch 15 was aborted (cancelled: aborted by admin: ...)``: one line."""
        what = {"completed": "completed", "aborted": "aborted"}.get(self.status,
                                                                   "decided earlier")
        why = ": ".join(p for p in (self.reason, self.detail) if p)
        return f"epoch {self.epoch_id} was {what}" + (f" ({why})" if why else "")
