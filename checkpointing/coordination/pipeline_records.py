"""What the coordinator records beside the epochs for people: the alert of an aborted epoch
(PROTOCOL 5.12), the staleness alert of a lineage that stopped completing (5.18), and where
a backfill lineage starts (5.9). Each alert is recorded once, by whichever process writes
it first: that process delivers it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.staleness import (
    StaleAlert,
    StaleResolved,
    record_resolved,
    record_stale_alert,
    stale,
)
from checkpointing.protocol.documents import now_iso, parse_iso
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.registry import MAIN
from checkpointing.records.alerts import EpochAlert, record_alert
from checkpointing.records.backfill_lineages import LineageOrigin, delete_origin, record_origin
from checkpointing.storage import Storage


@dataclass(frozen=True)
class Staleness:
    """A lineage that has not completed an epoch for longer than its maximum age."""

    #: the epoch it last completed, and when that epoch's age passed the maximum
    last_epoch_id: int
    since: str
    #: whether its staleness alert was recorded (someone was paged)
    alerted: bool


class PipelineRecords:
    """Alerts and lineage origins of one pipeline."""

    def __init__(self, store: EpochStore, config: CheckpointConfig, clock: Callable[[], float]):
        self.store, self.config, self.clock = store, config, clock

    @classmethod
    def open(cls, storage: Storage, pipeline_id: str, config: CheckpointConfig,
             clock: Callable[[], float] = time.time) -> PipelineRecords:
        """The records of ``pipeline_id`` in ``storage``, without a coordinator: what an
        abort listener is built with before the coordinator that will call it."""
        return cls(EpochStore(storage, Layout(pipeline_id), clock), config, clock)

    def record_alert(self, alert: EpochAlert) -> bool:
        """Write an aborted epoch's alert record; True when this call wrote it (deliver
        the alert), False when another process had (stay quiet)."""
        return record_alert(self.store.storage, self.store.layout, alert)

    def stale_alert(self, lineage: str = MAIN) -> StaleAlert | None:
        """The staleness alert of ``lineage`` when its last completed epoch is older than
        ``config.max_epoch_age_seconds`` and this call recorded it first (deliver it); None
        otherwise: not stale, no age configured, no completed epoch yet, or another
        process already alerted for this stale period (PROTOCOL 5.18)."""
        if self.config.max_epoch_age_seconds is None:
            return None
        latest = self.store.latest_completed(lineage)
        meta = self.store.metadata(latest) if latest is not None else None
        if latest is None or meta is None or not meta.decided_at:
            return None
        alert = stale(self.store.pipeline_id, lineage, latest, meta.decided_at,
                      parse_iso(meta.decided_at), self.clock(),
                      self.config.max_epoch_age_seconds)
        if alert is None or not record_stale_alert(self.store.storage, self.store.layout, alert):
            return None
        return alert

    def staleness(self, lineage: str = MAIN) -> Staleness | None:
        """``lineage``'s staleness now: its last completed epoch older than
        ``config.max_epoch_age_seconds``, since when, and whether the alert was recorded;
        None when it is not stale (or no age is configured, or nothing completed yet).
        Read only: unlike :meth:`stale_alert`, it records nothing."""
        max_age = self.config.max_epoch_age_seconds
        latest = self.store.latest_completed(lineage) if max_age is not None else None
        meta = self.store.metadata(latest) if latest is not None else None
        if max_age is None or latest is None or meta is None or not meta.decided_at:
            return None
        became = parse_iso(meta.decided_at) + max_age
        if self.clock() <= became:
            return None
        alerted = self.store.storage.exists(self.store.layout.stale_alert(lineage, latest))
        return Staleness(latest, now_iso(became), alerted)

    def last_completed_age(self, lineage: str = MAIN) -> float | None:
        """Seconds since ``lineage``'s last completed epoch was decided (Flink's
        ``lastCheckpointAge``); None before its first."""
        latest = self.store.latest_completed(lineage)
        meta = self.store.metadata(latest) if latest is not None else None
        if meta is None or not meta.decided_at:
            return None
        return max(0.0, self.clock() - parse_iso(meta.decided_at))

    def stale_resolved(self, lineage: str = MAIN) -> list[StaleResolved]:
        """The ends of ``lineage``'s stale periods that this call recorded first (deliver
        them): each staleness alert keyed by an epoch older than the last completed one,
        whose end nobody recorded yet (PROTOCOL 5.18)."""
        latest = self.store.latest_completed(lineage)
        meta = self.store.metadata(latest) if latest is not None else None
        if latest is None or meta is None or not meta.decided_at:
            return []
        storage, layout = self.store.storage, self.store.layout
        prefix = layout.stale_alerts_prefix(lineage)
        keys = {o.key for o in storage.list(prefix)}
        out = []
        for key in sorted(keys):
            if key.endswith(".resolved.json"):
                continue
            try:
                after = int(key[len(prefix):].removesuffix(".json"))
            except ValueError:
                continue
            if after >= latest or layout.stale_resolved(lineage, after) in keys:
                continue
            resolved = StaleResolved(self.store.pipeline_id, lineage, after, latest,
                                     meta.decided_at, now_iso(self.clock()))
            if record_resolved(storage, layout, resolved):
                out.append(resolved)
        return out

    def record_origin(self, origin: LineageOrigin) -> None:
        """Record where a backfill lineage starts (PROTOCOL 5.9)."""
        record_origin(self.store.storage, self.store.layout, origin)

    def delete_origin(self, lineage: str) -> None:
        """Forget a backfill lineage that never began an epoch."""
        delete_origin(self.store.storage, self.store.layout, lineage)
