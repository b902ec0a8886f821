"""The coordinator's collaborators on their own, each with an injected clock: the request
decider (owner, capacity, pause), the promotion rule (main waits for a promoting backfill
for one timeout after its last start), the parent selector (latest, fallback past an epoch
whose files do not verify), the failure manager (counting failures, not cancellations) and
the store (decisions read from what retention leaves)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from checkpointing import CheckpointConfig, Coordinator
from checkpointing.coordination.epoch_store import EpochStore
from checkpointing.coordination.failure_manager import FailureManager
from checkpointing.coordination.parent_selector import ParentSelector
from checkpointing.coordination.promotion import PromotionRule
from checkpointing.coordination.request_decider import RequestDecider
from checkpointing.errors import (
    FailureBudgetExhausted,
    MinPauseNotElapsed,
    PipelineOwnedElsewhere,
    PromotingBackfillRunning,
    TooManyConcurrentEpochs,
)
from checkpointing.protocol.documents import now_iso
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.registry import LineageState, OpenEpoch, Registry
from checkpointing.records.backfill_lineages import new_origin, record_origin
from tests.support.helpers import DIAMOND, FakeClock, run_epoch

T0 = 1_700_000_000.0


def _open(epoch_id: int, lineage: str = "main", run: str = "r") -> OpenEpoch:
    return OpenEpoch(epoch_id, lineage, now_iso(T0), now_iso(T0 + 60), run)


def test_request_decider_owner_capacity_and_pause():
    d = RequestDecider("p", CheckpointConfig(max_concurrent_epochs=2, min_pause_seconds=30))
    reg = Registry(owner="dag_a")
    d.check_owner(reg, "dag_a")
    d.check_owner(Registry(), "dag_b")  # unowned: the first begin claims it
    with pytest.raises(PipelineOwnedElsewhere, match="checkpointed by DAG 'dag_a'"):
        d.check_owner(reg, "dag_b")

    started = reg.with_lineage("main", LineageState(last_started_at=now_iso(T0)))
    with pytest.raises(MinPauseNotElapsed) as exc:
        d.check_capacity(started, "main", T0 + 10)
    assert exc.value.retry_after == pytest.approx(20)
    d.check_capacity(started, "main", T0 + 30)  # exactly the pause: admitted
    d.check_capacity(started, "bf", T0 + 10)    # another lineage has its own pause

    full = replace(reg, open=(_open(1), _open(2, run="r2")))
    with pytest.raises(TooManyConcurrentEpochs, match=r"\[1, 2\]"):
        d.check_capacity(full, "main", T0 + 100)
    d.check_capacity(full, "bf", T0 + 100)
    assert [o.epoch_id for o in d.full(full, "main", "r3")] == [1, 2]
    assert d.full(full, "main", "r2") == []  # its own epoch does not count against it


def test_promotion_rule_holds_main_for_one_timeout_after_the_last_start(storage):
    clock = FakeClock(T0)
    cfg = CheckpointConfig(timeout_seconds=100)
    rule = PromotionRule(EpochStore(storage, Layout("p"), clock), cfg)
    record_origin(storage, Layout("p"), new_origin("bf", "2013-01-01", "2013-01-05", T0,
                                                   from_epoch=3, promote=True))
    reg = Registry()
    with pytest.raises(PromotingBackfillRunning, match="backfill bf"):
        rule.check_main_may_begin(reg)  # created just now
    clock.advance(101)
    rule.check_main_may_begin(reg)  # one timeout after its start, nothing open: main goes
    running = replace(reg, open=(_open(7, "bf"),))
    with pytest.raises(PromotingBackfillRunning):
        rule.check_main_may_begin(running)  # an open epoch holds main whatever its age
    restarted = reg.with_lineage("bf", LineageState(last_started_at=now_iso(clock() - 50)))
    with pytest.raises(PromotingBackfillRunning):
        rule.check_main_may_begin(restarted)


def test_parent_selector_falls_back_past_an_epoch_that_does_not_verify(storage, tmp_path):
    c = Coordinator(storage, "p", clock=FakeClock(T0))
    first = run_epoch(c, tmp=tmp_path, run_id="r1").epoch_id
    second = run_epoch(c, tmp=tmp_path, run_id="r2", payload=b"y").epoch_id
    sel = ParentSelector(c.store, c.config, PromotionRule(c.store, c.config))
    assert sel.latest("main") == second
    assert sel.choose_latest(c.registry(), "main", DIAMOND, False) == (second, [])
    # A state file of the newest epoch is damaged: the selector says so and goes back.
    ref = c.completed_handles(second)["sink"].files[0]
    storage.write(storage.key_for_uri(ref.uri), b"damaged")
    parent, skipped = sel.choose_latest(c.registry(), "main", DIAMOND, False)
    assert parent == first
    assert [s["epoch_id"] for s in skipped] == [second] and skipped[0]["problems"]
    assert sel.latest("bf") is None


def test_failure_manager_counts_failures_not_cancellations(storage, tmp_path):
    c = Coordinator(storage, "p", CheckpointConfig(tolerable_failed_epochs=1))
    fm = FailureManager(c.store, c.config)
    for reason in ("declined", "cancelled", "timeout"):
        b = c.begin_epoch(DIAMOND, f"r-{reason}")
        c.abort(b.epoch_id, reason, "x")
    # declined, then a cancellation (not counted, not a reset), then a timeout: 2 > 1
    assert c.registry().lineage("main").consecutive_failed == 2
    assert fm.exhausted()
    with pytest.raises(FailureBudgetExhausted, match="2 consecutive failed"):
        fm.check()
    run_epoch(c, tmp=tmp_path, run_id="ok")
    assert not fm.exhausted() and c.registry().lineage("main").consecutive_failed == 0


def test_collaborators_are_passed_in(storage, tmp_path):
    """A coordinator uses the store and failure manager it is given: here a budget of no
    failure at all, stricter than the coordinator's own configuration."""
    store = EpochStore(storage, Layout("p"), FakeClock())
    strict = FailureManager(store, CheckpointConfig(tolerable_failed_epochs=0))
    c = Coordinator(storage, "p", CheckpointConfig(tolerable_failed_epochs=5), store=store,
                    failures=strict)
    assert c.store is store and c._failures is strict
    b = c.begin_epoch(DIAMOND, "r1")
    c.abort(b.epoch_id, "declined", "bad data")
    assert c.failures_exhausted()
    with pytest.raises(FailureBudgetExhausted, match="1 consecutive failed epoch"):
        c.check_failures()  # what a run asks before it begins an epoch
    assert not Coordinator(storage, "p", CheckpointConfig(tolerable_failed_epochs=5)) \
        .failures_exhausted()
    with pytest.raises(ValueError, match="store of pipeline 'p' given to the coordinator"):
        Coordinator(storage, "q", store=store)


def test_store_forgets_what_retention_deleted(storage, tmp_path):
    c = Coordinator(storage, "p")
    meta = run_epoch(c, tmp=tmp_path)
    assert c.store.metadata(meta.epoch_id) is meta  # cached
    storage.delete(c.layout.metadata(meta.epoch_id))
    assert c.store.metadata(meta.epoch_id) is meta  # a cache until told
    c.store.forget(meta.epoch_id)
    assert c.store.metadata(meta.epoch_id) is None
