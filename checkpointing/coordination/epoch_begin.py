"""Beginning an epoch (Flink's checkpoint triggering, PROTOCOL 6.1): settle what is open,
choose the parent, pin the table inputs, allocate the id under the request decider's rules
and write the barrier, in the protocol's order, each step refusing before anything is
written that a retry would trip over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from checkpointing.config import CheckpointConfig
from checkpointing.coordination.epoch_decisions import EpochDecisions
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.parent_selector import LATEST, ParentChoice, ParentSelector
from checkpointing.coordination.promotion import PromotionRule
from checkpointing.coordination.request_decider import RequestDecider
from checkpointing.coordination.run_index import RunIndex
from checkpointing.errors import PreconditionFailed, StorageError
from checkpointing.ids import validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.barrier import Barrier, TaskPlan
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.listener import EpochListener
from checkpointing.protocol.registry import MAIN, OpenEpoch, Registry
from checkpointing.tables.pins import TablePins

log = logging.getLogger("checkpointing.coordination.coordinator")


class BeginOptions(TypedDict, total=False):
    """The optional fields of a :class:`BeginRequest`, as keyword arguments of
    :meth:`Coordinator.begin_epoch`."""

    lineage: str
    data_interval: dict[str, str] | None
    input_range: Any
    parent_epoch_id: ParentChoice
    parent_savepoint: str | None
    publish_on_complete: bool
    allow_non_restored_state: bool
    promote: bool
    owner: str | None
    join: bool
    min_table_versions: Mapping[str, int] | None


@dataclass(frozen=True)
class BeginRequest:
    """What a begin asks for, validated on construction.

    ``parent_epoch_id`` defaults to the lineage's latest completed epoch; an explicit parent
    epoch or ``parent_savepoint`` is checked against the plan: state of tasks the plan lacks
    is an error unless ``allow_non_restored_state`` (Flink's flag of the same name).
    ``promote``: this backfill epoch continues the main line when it completes, if its input
    reaches main's (PROTOCOL 6.5, 1.4). ``owner``: the DAG opening the epoch; the first begin
    records it, and a begin of another owner is refused (1.7). ``join``: when the run
    already has an epoch open in the lineage, return it instead of allocating another,
    decided inside the allocation's compare-and-swap, so that the run's root tasks, racing
    to begin its epoch, share one (PROTOCOL 6.1, 1.10). ``min_table_versions``: per table
    input, the lowest version the epoch may read up to (the version of the asset event that
    triggered the run): a table found older is refused (PROTOCOL 6.14)."""

    plan: Mapping[str, TaskPlan]
    run_id: str
    lineage: str = MAIN
    data_interval: dict[str, str] | None = None
    #: what the run's input is, for people and for promotion (a JSON value)
    input_range: Any = None
    parent_epoch_id: ParentChoice = LATEST
    parent_savepoint: str | None = None
    publish_on_complete: bool = True
    allow_non_restored_state: bool = False
    promote: bool = False
    owner: str | None = None
    join: bool = False
    min_table_versions: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        validate_id(self.lineage, "lineage")
        if self.promote and self.lineage == MAIN:
            raise ValueError("only a backfill lineage's epoch can be promoted to main")
        if not self.plan:
            raise ValueError("an epoch needs at least one task in its plan")
        for task, tp in self.plan.items():
            validate_id(task, "task id")
            for up in tp.upstream:
                if up not in self.plan:
                    raise ValueError(f"task {task!r} has upstream {up!r} that is not in the plan")


class EpochBeginner:
    """Begins the epochs of one pipeline."""

    def __init__(self, store: EpochStore, config: CheckpointConfig, parents: ParentSelector,
                 promotion: PromotionRule, decisions: EpochDecisions, runs: RunIndex,
                 table_pins: TablePins, listener: EpochListener, clock: Callable[[], float]):
        self.store, self.config, self.parents, self.promotion = store, config, parents, promotion
        self.decisions, self.runs, self.table_pins = decisions, runs, table_pins
        self.listener, self.clock = listener, clock
        self.decider = RequestDecider(store.pipeline_id, config)

    def begin(self, req: BeginRequest) -> Barrier:
        """Allocate the next epoch id and write its barrier (PROTOCOL 6.1)."""
        # The order is the protocol's (6.1); each step may refuse, and none before the
        # allocation writes anything but decisions of epochs already due.
        req = self._resolve_explicit_parent(req)
        reg = self._settle_open_epochs(req)
        asked, fallback = req.parent_epoch_id, list[JsonObject]()
        if asked is LATEST:
            # Chosen and verified before an id is allocated: a refusal here (malformed
            # metadata) must not leave a burned id behind to block the next try.
            parent, fallback = self.parents.choose_latest(reg, req.lineage, req.plan,
                                                          req.allow_non_restored_state)
        else:
            parent = asked
        # Pinned before an id is allocated, as the parent: an unreadable upstream table
        # refuses the begin without leaving a burned id.
        plan = self.table_pins.resolve(req.plan)  # catalog names: the locations they have
        versions = self.table_pins.pin_all(plan, req.min_table_versions)
        burned = self._own_burned_entry(reg, req.run_id, req.lineage)
        entry, joined = (burned, False) if burned is not None else self._allocate(req)
        if burned is not None:
            # This run's previous try allocated the id and died before the barrier (or,
            # joining, another task of the run is writing it): the id is this run's, so its
            # barrier is written now rather than the id left to block until expiry.
            log.log(logging.INFO if req.join else logging.WARNING,
                    "pipeline %s: run %s writes the barrier of epoch %d, allocated by %s",
                    self.store.pipeline_id, req.run_id, entry.epoch_id,
                    "another task of the run" if req.join else "its previous try")
        if joined:
            barrier = self.store.barrier_or_none(entry.epoch_id)
            if barrier is not None:
                return barrier
        barrier = Barrier(
            pipeline_id=self.store.pipeline_id, epoch_id=entry.epoch_id, run_id=req.run_id,
            lineage=req.lineage, plan=plan, created_at=entry.created_at,
            deadline=entry.deadline, config=self.config, mode=self.config.mode,
            data_interval=req.data_interval, input_range=req.input_range,
            parent_epoch_id=parent,
            parent_savepoint=req.parent_savepoint, publish_on_complete=req.publish_on_complete,
            writer=writer_identity(), restore_fallback=tuple(fallback), promote=req.promote,
            table_versions=versions,
        )
        # A joining begin shares its id with the run's other tasks: whichever writes the
        # barrier first wins, the allocator included (a joiner can write it before it).
        return self._write_barrier(barrier, reclaimed=burned is not None or req.join)

    def _resolve_explicit_parent(self, req: BeginRequest) -> BeginRequest:
        """A backfill lineage without completed epochs starts from its origin; an explicit
        parent epoch or savepoint is checked against the plan."""
        parent, savepoint = req.parent_epoch_id, req.parent_savepoint
        if parent is LATEST and savepoint is None and req.lineage != MAIN:
            parent, savepoint = self.parents.origin_parent(req.lineage)
        parent = self.parents.check_explicit(req.plan, parent, savepoint,
                                             req.allow_non_restored_state)
        return replace(req, parent_epoch_id=parent, parent_savepoint=savepoint)

    def _settle_open_epochs(self, req: BeginRequest) -> Registry:
        """Before allocating: finish interrupted decisions, check the owner (before anything
        is expired or written), expire overdue epochs, wait for a promoting backfill (main
        only), and abort lost runners when the lineage is full. Returns the registry after."""
        reg = self.decisions.recover()
        self.decider.check_owner(reg, req.owner)
        if self.decisions.expire_overdue():
            reg = self.store.registry()
        if req.lineage == MAIN:
            self.promotion.check_main_may_begin(reg)
        full = self.decider.full(reg, req.lineage, req.run_id)
        if full and self.decisions.expire_lost_runners(full):
            reg = self.store.registry()
        return reg

    def _allocate(self, req: BeginRequest) -> tuple[OpenEpoch, bool]:
        """Allocate the next id in the registry, admitted by the request decider inside the
        same compare-and-swap (two racing begins cannot both pass); (entry, joined): a
        joining begin gets the run's open entry instead, when there is one."""
        now = self.clock()
        created, deadline = now_iso(now), now_iso(now + self.config.timeout_seconds)

        def allocate(reg: Registry) -> tuple[Registry | None, tuple[OpenEpoch, bool]]:
            if req.join:
                own = [o for o in reg.open
                       if o.run_id == req.run_id and o.lineage == req.lineage]
                if own:
                    return None, (own[-1], True)
            self.decider.check_owner(reg, req.owner)
            self.decider.check_capacity(reg, req.lineage, now)
            entry = OpenEpoch(reg.last_epoch_id + 1, req.lineage, created, deadline,
                              req.run_id)
            reg = replace(reg, last_epoch_id=entry.epoch_id, open=(*reg.open, entry),
                          owner=reg.owner or req.owner)
            st = reg.lineage(req.lineage)
            return (reg.with_lineage(req.lineage, replace(st, last_started_at=created)),
                    (entry, False))

        return self.store.update_registry(allocate)

    def _write_barrier(self, barrier: Barrier, reclaimed: bool) -> Barrier:
        try:
            self.store.create_barrier(barrier)
        except PreconditionFailed:
            if reclaimed:  # a concurrent try (or task) of the same run wrote it first
                theirs = self.store.reread_barrier(barrier.epoch_id)
                if (theirs.run_id, theirs.lineage) == (barrier.run_id, barrier.lineage):
                    return theirs
            raise StorageError(
                f"epoch id {barrier.epoch_id} was just allocated but its barrier exists: the "
                "registry is behind the stored epochs; refusing to reuse the id") from None
        self.runs.record(barrier)
        self.listener.epoch_began(barrier)
        log.info("pipeline %s: began epoch %d (run %s, lineage %s, parent %s)",
                 self.store.pipeline_id, barrier.epoch_id, barrier.run_id, barrier.lineage,
                 barrier.parent_epoch_id)
        return barrier

    def _own_burned_entry(self, reg: Registry, run_id: str, lineage: str) -> OpenEpoch | None:
        """An open entry allocated by ``run_id`` that has neither barrier nor decision."""
        for entry in reg.open:
            if entry.run_id != run_id or entry.lineage != lineage:
                continue
            if self.store.barrier_or_none(entry.epoch_id) is None and \
                    self.store.metadata(entry.epoch_id) is None:
                return entry
        return None
