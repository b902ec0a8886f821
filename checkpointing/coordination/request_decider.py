"""Whether a new epoch may begin (Flink's ``CheckpointRequestDecider``).

Checked inside the registry's compare-and-swap that allocates the id, so that two begins
racing each other cannot both pass: the pipeline's owner, ``max_concurrent_epochs`` per
lineage and ``min_pause_seconds`` since the lineage's previous start.
"""

from __future__ import annotations

from checkpointing.config import CheckpointConfig
from checkpointing.errors import MinPauseNotElapsed, PipelineOwnedElsewhere, TooManyConcurrentEpochs
from checkpointing.protocol.documents import parse_iso
from checkpointing.protocol.registry import OpenEpoch, Registry


class RequestDecider:
    """Admits or refuses the begin of an epoch against the registry it would change."""

    def __init__(self, pipeline_id: str, config: CheckpointConfig):
        self.pipeline_id, self.config = pipeline_id, config

    def check_owner(self, reg: Registry, owner: str | None) -> None:
        """(1.7) The first begin records its DAG; a begin of another DAG is refused."""
        if owner is not None and reg.owner is not None and reg.owner != owner:
            raise PipelineOwnedElsewhere(
                f"pipeline {self.pipeline_id!r} on this storage is checkpointed by DAG "
                f"{reg.owner!r}; DAG {owner!r} needs a pipeline id of its own "
                "(CheckpointSettings.pipeline_id) or other storage")

    def check_capacity(self, reg: Registry, lineage: str, now: float) -> None:
        """Refuse when the lineage has ``max_concurrent_epochs`` pending epochs, or its
        previous epoch started less than ``min_pause_seconds`` ago."""
        live = [o for o in reg.open if o.lineage == lineage]
        if len(live) >= self.config.max_concurrent_epochs:
            raise TooManyConcurrentEpochs(
                f"pipeline {self.pipeline_id!r} lineage {lineage!r} has {len(live)} pending "
                f"epoch(s) {[o.epoch_id for o in live]}; max_concurrent_epochs is "
                f"{self.config.max_concurrent_epochs}")
        started = reg.lineage(lineage).last_started_at
        if started and self.config.min_pause_seconds:
            wait = parse_iso(started) + self.config.min_pause_seconds - now
            if wait > 0:
                raise MinPauseNotElapsed(
                    f"pipeline {self.pipeline_id!r}: the previous epoch started "
                    f"{self.config.min_pause_seconds - wait:.1f}s ago; min_pause_seconds is "
                    f"{self.config.min_pause_seconds}", retry_after=wait)

    def full(self, reg: Registry, lineage: str, run_id: str) -> list[OpenEpoch]:
        """The lineage's pending epochs of other runs, when they fill its capacity (the
        candidates for ``runner_lost``); [] otherwise."""
        live = [o for o in reg.open if o.lineage == lineage and o.run_id != run_id]
        return live if len(live) >= self.config.max_concurrent_epochs else []
