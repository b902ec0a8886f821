"""The promotion rule (PROTOCOL 6.5, protocol 1.4) in one place.

A backfill lineage begun with ``promote`` continues the main line when its last epoch
completes, if main's latest completed epoch is older and main's input does not reach
further. Three questions follow from the rule, and only this module answers them: may a
main epoch begin while such a backfill runs, is a completed epoch promoted (decided once
and recorded), and is a completed epoch on the main line's state.
"""

from __future__ import annotations

import logging

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.errors import PromotingBackfillRunning
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.documents import now_iso, parse_iso
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.registry import MAIN, Registry
from checkpointing.records.backfill_lineages import (
    Promotion,
    list_origins,
    read_promotion,
    record_promotion,
)

log = logging.getLogger("checkpointing.coordination.promotion")


class PromotionRule:
    """Answers the promotion questions of one pipeline from its stored records."""

    def __init__(self, store: EpochStore, config: CheckpointConfig):
        self.store, self.config = store, config

    def check_main_may_begin(self, reg: Registry) -> None:
        """Refuse a main epoch while a backfill that asked to continue the main line is
        running: it has no promotion record yet, and an open epoch or an epoch (or its
        origin) started within ``timeout_seconds``. A backfill that died stops holding main
        back one timeout after its last start."""
        now = self.store.clock()
        # One listing; only undecided origins are read (decided ones have a promotion record).
        for origin in list_origins(self.store.storage, self.store.layout, undecided_only=True):
            if not origin.promote:
                continue
            last = reg.lineage(origin.lineage).last_started_at or origin.created_at
            open_ids = [o.epoch_id for o in reg.open if o.lineage == origin.lineage]
            if open_ids or parse_iso(last) + self.config.timeout_seconds > now:
                raise PromotingBackfillRunning(
                    f"pipeline {self.store.pipeline_id!r}: backfill {origin.lineage} (runs "
                    f"{origin.start}..{origin.end}) will continue the main line when it "
                    "completes; main runs wait for it")

    def decide(self, meta: EpochMetadata, barrier: Barrier, main: int | None) -> bool:
        """Whether the completed promoting epoch ``meta`` continues the main line, whose
        latest completed epoch is ``main``; decided once (the first record wins)."""
        rec = read_promotion(self.store.storage, self.store.layout, meta.lineage)
        if rec is None:
            main_barrier = self.store.barrier_or_none(main) if main else None
            main_until = main_barrier.input_until if main_barrier else None
            ours = barrier.input_until
            promoted = (main is None or main < meta.epoch_id) and (
                main_until is None or (ours is not None and ours >= main_until))
            rec = record_promotion(self.store.storage, self.store.layout, Promotion(
                meta.lineage, meta.epoch_id, promoted, main, ours, main_until,
                now_iso(self.store.clock())))
            log.info("pipeline %s: backfill %s epoch %d %s", self.store.pipeline_id,
                     meta.lineage, meta.epoch_id,
                     f"continues the main line (superseding epoch {main})" if rec.promoted
                     else f"not promoted: main (epoch {main}) has input until {main_until}, "
                     f"the backfill until {ours}")
        return rec.promoted and rec.epoch_id == meta.epoch_id

    def on_line(self, meta: EpochMetadata, lineage: str) -> bool:
        """Whether a completed epoch belongs to ``lineage``'s line of state: its own epochs,
        and for main a backfill's epoch that was promoted to continue it."""
        if meta.lineage == lineage:
            return True
        if lineage != MAIN:
            return False
        rec = read_promotion(self.store.storage, self.store.layout, meta.lineage)
        return rec is not None and rec.promoted and rec.epoch_id == meta.epoch_id
