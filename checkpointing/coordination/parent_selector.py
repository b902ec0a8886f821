"""Which completed epoch (or savepoint) a new epoch restores from (PROTOCOL 6.1).

By default the lineage's latest completed epoch, verified before the id is allocated and
falling back to an earlier one when its files do not verify; a backfill lineage starts from
its origin's epoch or savepoint. An explicit parent, and the parent after a change of the
DAG, are checked against the plan like Flink's savepoint state mapping: state of a task the
plan lacks is an error unless ``allow_non_restored_state``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Literal

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.promotion import PromotionRule
from checkpointing.errors import CheckpointError, MalformedDocument, NotFound
from checkpointing.ids import validate_epoch_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.barrier import TaskPlan
from checkpointing.protocol.registry import Registry
from checkpointing.records.backfill_lineages import read_origin
from checkpointing.state.verify import VerifyReport, read_record, verify_handles, write_record

log = logging.getLogger("checkpointing.coordination.parent_selector")

class _Latest(enum.Enum):
    LATEST = "latest"


#: Sentinel parent: restore from the lineage's latest completed epoch.
LATEST = _Latest.LATEST
#: a parent as a begin asks for it: an epoch id, none (empty state or a savepoint), LATEST
ParentChoice = int | None | Literal[_Latest.LATEST]


class RestoreMappingError(CheckpointError):
    """The restore source holds state for tasks that the new plan does not have."""


def check_mapping(tasks_with_state: set[str], plan: Mapping[str, TaskPlan], source: str,
                  allow: bool) -> None:
    """Refuse state of tasks the plan lacks unless ``allow`` (allowNonRestoredState)."""
    unmapped = sorted(tasks_with_state - set(plan))
    if unmapped and not allow:
        raise RestoreMappingError(
            f"{source} holds state for task(s) {unmapped} that the plan does not have "
            "(removed from the DAG?): put them back, or allow non-restored state "
            "(allow_non_restored_state=True) to drop their state")


class ParentSelector:
    """Chooses and checks the parent of a new epoch of one pipeline."""

    def __init__(self, store: EpochStore, config: CheckpointConfig, promotion: PromotionRule):
        self.store, self.config, self.promotion = store, config, promotion

    # ------------------------------------------------------------------ explicit parents
    def origin_parent(self, lineage: str) -> tuple[ParentChoice, str | None]:
        """The parent a backfill lineage starts from before it has completed epochs."""
        origin = read_origin(self.store.storage, self.store.layout, lineage)
        if origin is None or self.latest(lineage) is not None:
            return LATEST, None
        return (origin.from_epoch, None) if origin.from_epoch else (LATEST, origin.from_savepoint)

    def check_explicit(self, plan: Mapping[str, TaskPlan], parent_epoch_id: ParentChoice,
                       parent_savepoint: str | None, allow: bool) -> ParentChoice:
        """Check an explicit parent epoch or savepoint against the plan; return the parent
        epoch id the barrier names (None for a savepoint, LATEST when none was given)."""
        if parent_savepoint is not None:
            from checkpointing.records.savepoints import read_savepoint

            sp = read_savepoint(self.store.storage, self.store.layout, parent_savepoint)
            check_mapping(set(sp.acks), plan, f"savepoint {parent_savepoint!r}", allow)
            return None
        if parent_epoch_id is LATEST or parent_epoch_id is None:
            return parent_epoch_id
        parent_epoch_id = validate_epoch_id(parent_epoch_id)
        meta = self.store.metadata(parent_epoch_id)
        if meta is None or not meta.completed:
            raise CheckpointError(
                f"cannot restore from epoch {parent_epoch_id}: it is not completed")
        check_mapping(set(meta.acks), plan, f"epoch {parent_epoch_id}", allow)
        return parent_epoch_id

    # ------------------------------------------------------------------ the latest parent
    def latest(self, lineage: str, reg: Registry | None = None) -> int | None:
        """The lineage's latest completed epoch (:meth:`EpochStore.latest_completed`)."""
        return self.store.latest_completed(lineage, reg)

    def choose_latest(self, reg: Registry, lineage: str, plan: Mapping[str, TaskPlan],
                      allow: bool) -> tuple[int | None, list[JsonObject]]:
        """The latest completed epoch that verifies, and the epochs skipped on the way;
        checked against the plan (a removed task's state needs ``allow``)."""
        parent = self.latest(lineage, reg)
        fallback: list[JsonObject] = []
        if parent is not None and self.config.verify_restore:
            parent, fallback = self.verified(parent, lineage)
        if parent is not None:
            self.check_plan_change(parent, plan, allow)
        return parent, fallback

    def verified(self, epoch_id: int, lineage: str) -> tuple[int | None, list[JsonObject]]:
        """The newest completed epoch of ``lineage``, from ``epoch_id`` down, whose files
        all verify, and the epochs skipped on the way with their problems. None when none
        verifies: the epoch then starts from empty state and its sources replay all input,
        which is slow but exactly-once."""
        skipped: list[JsonObject] = []
        older: list[int] | None = None
        candidate: int | None = epoch_id
        while candidate is not None:
            problems = self._restore_problems(candidate, lineage)
            if problems is None:
                pass  # not a completed epoch of this lineage
            elif not problems:
                return candidate, skipped
            else:
                log.warning("pipeline %s: epoch %d cannot be restored (%s); falling back to an "
                            "earlier completed epoch", self.store.pipeline_id, candidate,
                            problems[0])
                skipped.append({"epoch_id": candidate, "problems": problems[:5]})
            if older is None:
                older = [e for e in self.store.epoch_ids() if e < epoch_id]
            candidate = older.pop() if older else None
        return None, skipped

    def _restore_problems(self, epoch_id: int, lineage: str) -> list[str] | None:
        """Why a completed epoch of ``lineage`` cannot be restored ([] when it can); None
        when ``epoch_id`` is not a completed epoch of that lineage. A malformed or
        newer-version ``_metadata`` is not a reason to fall back: it is refused (raised)."""
        meta = self.store.metadata(epoch_id)
        if meta is None or not meta.completed or not self.promotion.on_line(meta, lineage):
            return None
        try:
            return list(self._verify(epoch_id).problems)
        except (NotFound, MalformedDocument) as exc:  # an acknowledgement lost or damaged
            return [str(exc)]

    def _verify(self, epoch_id: int) -> VerifyReport:
        """Verify a completed epoch's files against the newest verification record (5.16)
        of the epoch itself or of its parent: files unchanged since are checked by size and
        stamp, the others by the store's checksum or hashed; a clean verification is
        recorded for the next begin."""

        storage, layout = self.store.storage, self.store.layout
        record = read_record(storage, layout, epoch_id)
        if record is None:
            parent = self.store.barrier(epoch_id).parent_epoch_id
            if parent is not None:
                record = read_record(storage, layout, parent)
        report = verify_handles(storage, epoch_id, self.store.completed_handles(epoch_id),
                                known=record.files if record else None)
        log.info("pipeline %s: epoch %d verified for restore: %d file(s) hashed (%d bytes), "
                 "%d by the store's checksum, %d unchanged since %s", self.store.pipeline_id,
                 epoch_id, report.files_checked, report.bytes_checked,
                 report.files_checked_by_store, report.files_unchanged,
                 f"epoch {record.epoch_id}'s record" if record else "no record")
        if report.ok and (record is None or record.epoch_id != epoch_id):
            write_record(storage, layout, report, self.store.clock())
        return report

    def check_plan_change(self, parent: int, plan: Mapping[str, TaskPlan], allow: bool) -> None:
        """The DAG changed since the parent epoch (Flink's savepoint mapping): a new task
        starts from empty state (logged); a removed task that has state is refused unless
        ``allow`` (allowNonRestoredState)."""
        meta = self.store.metadata(parent)
        with_state = set(meta.acks) if meta is not None else set()
        added = sorted(set(plan) - with_state)
        if added:
            log.warning("pipeline %s: task(s) %s are not in parent epoch %d: they start from "
                        "empty state", self.store.pipeline_id, added, parent)
        check_mapping(with_state, plan, f"parent epoch {parent}", allow)
