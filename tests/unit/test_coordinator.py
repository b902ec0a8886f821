"""Coordinator operations on local storage and on the real S3 server."""

from __future__ import annotations

import pytest

from bench.harness.race import race
from checkpointing import (
    AlignmentError,
    CheckpointConfig,
    Coordinator,
    RestoreMappingError,
    StateHandle,
    read_manifest,
)
from checkpointing.errors import (
    EpochAlreadyDecided,
    EpochIncomplete,
    EpochNotFound,
    InvalidId,
    MalformedDocument,
    MinPauseNotElapsed,
    StaleAttempt,
    StorageError,
    TooManyConcurrentEpochs,
    UnknownTask,
    UnsupportedVersion,
)
from checkpointing.protocol.acknowledgement import AckStatus
from checkpointing.protocol.attempts import scan_task
from checkpointing.protocol.barrier import TaskPlan
from checkpointing.protocol.operations import EngineOperation
from tests.support.helpers import DIAMOND, FakeClock, ack_task, run_epoch


def test_full_epoch_completes_and_publishes(storage, tmp_path):
    c = Coordinator(storage, "flights")
    meta = run_epoch(c, tmp=tmp_path)
    assert meta.completed and set(meta.acks) == set(DIAMOND)
    assert c.latest_completed() == 1
    m = read_manifest(storage, c.layout)
    assert m.epoch_id == 1 and list(m.outputs) == ["gold"]
    assert c.registry().open == ()


def test_ids_strictly_increase_and_parent_is_latest(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path)
    b2 = c.begin_epoch(DIAMOND, "r2")
    assert (b2.epoch_id, b2.parent_epoch_id) == (2, 1)


def test_barriers_skip_an_epoch_directory_without_a_barrier(storage, tmp_path):
    """A directory under ``epochs/`` exists before its barrier (a file system makes it
    first) and after a late write into a deleted epoch (PROTOCOL 6.11): listed by
    ``epoch_ids``, it is no epoch to describe, and enumerating barriers must not fail."""
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path)
    b2 = c.begin_epoch(DIAMOND, "r2", lineage="other")
    storage.write(c.layout.epoch_prefix(7) + "state/late.bin", b"late")
    assert c.epoch_ids() == [1, 2, 7]
    assert [b.epoch_id for b in c.barriers()] == [1, 2]
    assert c.barriers("other") == [b2]
    assert [b.run_id for b in c.barriers("main")] == ["r"]


def test_roots_racing_to_begin_a_run_share_one_epoch(storage, tmp_path):
    """A DAG run's root tasks each begin its epoch (PROTOCOL 6.1, 1.10): racing, they get
    one epoch; the next run gets the next; a run whose epoch was decided is not joined."""
    c = Coordinator(storage, "p", CheckpointConfig(max_concurrent_epochs=2))
    results, errors = race(lambda i: Coordinator(storage, "p", CheckpointConfig(
        max_concurrent_epochs=2)).begin_or_join(DIAMOND, "r1"), 8)
    assert not errors, errors
    assert {b.epoch_id for b in results} == {1}
    assert len({b.to_bytes() for b in results}) == 1  # one barrier, read back by the others
    assert [o.epoch_id for o in c.registry().open] == [1]
    assert c.begin_or_join(DIAMOND, "r2").epoch_id == 2
    c.abort(1, "cancelled", "by the test")
    assert c.begin_or_join(DIAMOND, "r1").epoch_id == 3  # decided: a new epoch
    # Without joining, a second begin of the same run is a second epoch (refused when full).
    with pytest.raises(TooManyConcurrentEpochs):
        c.begin_epoch(DIAMOND, "r2")


def test_a_root_that_writes_the_barrier_before_its_allocator_is_joined(storage):
    """The interleaving CI found: the begin step allocates the run's id, a root task of the
    same run joins that entry and writes the barrier first; the begin step's own write then
    loses and must take the root's barrier (same run), not refuse the id. A barrier of
    another run in its place is still refused."""
    allocator, root = Coordinator(storage, "p"), Coordinator(storage, "p")
    create = allocator.store.create_barrier
    joined = []

    def root_first(barrier):
        joined.append(root.begin_or_join(DIAMOND, "r1"))  # sees the entry, no barrier yet
        create(barrier)

    allocator.store.create_barrier = root_first
    b = allocator.begin_or_join(DIAMOND, "r1")
    assert joined and b.epoch_id == joined[0].epoch_id == 1
    assert b.writer == joined[0].writer  # the root's barrier, read back
    assert [o.epoch_id for o in allocator.registry().open] == [1]

    other = Coordinator(storage, "p2")
    create2 = other.store.create_barrier

    def foreign_first(barrier):
        from dataclasses import replace as dc_replace
        storage.create(other.layout.barrier(barrier.epoch_id),
                       dc_replace(barrier, run_id="someone-else").to_bytes())
        create2(barrier)

    other.store.create_barrier = foreign_first
    with pytest.raises(StorageError, match="registry is behind"):
        other.begin_or_join(DIAMOND, "r1")


def test_complete_refuses_until_every_task_acked(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)
    with pytest.raises(EpochIncomplete, match=r"\['join', 'sink', 'src_b'\]"):
        c.complete(b.epoch_id)
    assert c.metadata(b.epoch_id) is None and c.status(b.epoch_id) == "pending"


def test_ack_is_idempotent_for_same_attempt(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    first = ack_task(c, b.epoch_id, "src_a", files={"s": b"1"}, tmp=tmp_path)
    assert first.status == AckStatus.SUCCESS and first.completed is None
    again = c.acknowledge(b.epoch_id, "src_a", 1,
                          StateHandle("src_a", b.epoch_id, 1, metrics={"other": True}))
    assert again.status == AckStatus.DUPLICATE
    # the first acknowledgement stays
    assert again.acknowledgement.state_handle == first.acknowledgement.state_handle


def test_stale_attempt_is_fenced(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    c.register_attempt(b.epoch_id, "src_a", 1)
    c.register_attempt(b.epoch_id, "src_a", 2)  # a retry starts: attempt 1 is now stale
    with pytest.raises(StaleAttempt, match="attempt 2 exists"):
        c.acknowledge(b.epoch_id, "src_a", 1, StateHandle("src_a", b.epoch_id, 1))
    ack_task(c, b.epoch_id, "src_a", attempt=2, tmp=tmp_path)
    with pytest.raises(StaleAttempt):
        c.acknowledge(b.epoch_id, "src_a", 1, StateHandle("src_a", b.epoch_id, 1))


def _operation(task: str, attempt: int, action: str = "state:s") -> EngineOperation:
    return EngineOperation(task, attempt, action, "spark-connect", "s-1", f"op-{attempt}",
                           "2013-01-01T00:00:00.000Z", observations=("o1", "o2"))


def test_next_attempt_gets_the_killed_attempts_operation(storage, tmp_path):
    """PROTOCOL 5.17/6.3: the operation a killed attempt left is offered to the next one;
    never to the attempt itself, never once the recording attempt acknowledged or
    declined, and an unreadable record is no record (a hint, not a refusal)."""
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    e = b.epoch_id
    assert c.register_attempt(e, "src_a", 1).resume is None
    c.record_operation(e, _operation("src_a", 1, "state:bronze"))
    c.record_operation(e, _operation("src_a", 1, "output:delta"))  # the latest action wins
    assert c.register_attempt(e, "src_a", 1).resume is None  # its own record
    resumed = c.register_attempt(e, "src_a", 2).resume
    assert resumed == _operation("src_a", 1, "output:delta")
    assert resumed.observations == ("o1", "o2")
    # attempt 2 died before any long action: attempt 3 may still resume attempt 1's
    assert c.register_attempt(e, "src_a", 3).resume == resumed
    ack_task(c, e, "src_a", attempt=3, tmp=tmp_path)
    # another task: a record of a declined attempt is not offered
    c.record_operation(e, _operation("src_b", 1))
    assert scan_task(storage, c.layout, e, "src_b").resumable_operation(2) is not None
    c.decline(e, "src_b", 1, "bad data")
    assert scan_task(storage, c.layout, e, "src_b").resumable_operation(2) is None
    c2 = Coordinator(storage, "q")
    b2 = c2.begin_epoch(DIAMOND, "r")
    c2.record_operation(b2.epoch_id, _operation("src_a", 1))
    storage.write(c2.layout.attempt_object(b2.epoch_id, "src_a", 1, "operation"), b"{not json")
    assert c2.register_attempt(b2.epoch_id, "src_a", 2).resume is None
    assert storage.read(c2.layout.attempt_object(b2.epoch_id, "src_a", 1, "operation"))[0] \
        == b"{not json"  # left as it was
    # Nothing is recorded into a decided epoch (6.11), even one retention deleted.
    c2.abort(b2.epoch_id, "cancelled", "by hand")
    with pytest.raises(EpochAlreadyDecided):
        c2.record_operation(b2.epoch_id, _operation("src_b", 1))
    assert not storage.exists(c2.layout.attempt_object(b2.epoch_id, "src_b", 1, "operation"))


def test_racing_stale_ack_is_never_effective(storage, tmp_path):
    """Attempt 1 wrote its ack object after attempt 2 registered (it raced past the
    check): completion must use attempt 2's ack, never attempt 1's."""
    c = Coordinator(storage, "p")
    plan = {"t": TaskPlan(publishes=True)}
    b = c.begin_epoch(plan, "r")
    c.register_attempt(b.epoch_id, "t", 1)
    c.register_attempt(b.epoch_id, "t", 2)
    from checkpointing.protocol.acknowledgement import Acknowledgement
    zombie = Acknowledgement("t", 1, "2013-01-01T00:00:00.000Z", StateHandle("t", b.epoch_id, 1))
    storage.create(c.layout.attempt_object(b.epoch_id, "t", 1, "ack"), zombie.to_bytes())
    assert c.try_complete(b.epoch_id) is None  # attempt 2 has not acked
    ack_task(c, b.epoch_id, "t", attempt=2, outputs={"gold": b"good"}, tmp=tmp_path)
    meta = c.complete(b.epoch_id)
    assert meta.acks["t"].attempt == 2


def test_already_acked_task_is_not_run_again(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    first = ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)
    start = c.register_attempt(b.epoch_id, "src_a", 2)  # Airflow cleared the task
    assert start.existing is not None and start.existing.attempt == first.acknowledgement.attempt


def test_unknown_task_and_bad_ids(storage):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    with pytest.raises(UnknownTask, match="'nope' is not in the plan"):
        c.acknowledge(b.epoch_id, "nope", 1, StateHandle("nope", b.epoch_id, 1))
    for bad in ["../x", "", "a/b", "a..b", "-x"]:
        with pytest.raises(InvalidId):
            c.register_attempt(b.epoch_id, bad, 1)
    with pytest.raises(InvalidId):
        Coordinator(storage, "../../etc")
    with pytest.raises(InvalidId):
        c.barrier("1; rm -rf")
    with pytest.raises(EpochNotFound):
        c.barrier(99)


def test_ack_after_decision_is_refused(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    c.abort(b.epoch_id, "cancelled", "user cancelled the run")
    with pytest.raises(EpochAlreadyDecided, match="was aborted"):
        ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)


def test_decline_aborts_and_counts_failure(storage, tmp_path):
    c = Coordinator(storage, "p", CheckpointConfig(tolerable_failed_epochs=1))
    b = c.begin_epoch(DIAMOND, "r")
    ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)
    meta = c.decline(b.epoch_id, "src_b", 1, "42% malformed rows")
    assert (meta.status, meta.reason, meta.declined_by) == ("aborted", "declined", "src_b")
    assert "42% malformed rows" in meta.detail
    assert c.try_complete(b.epoch_id).status == "aborted"  # everyone sees the winner
    assert c.registry().lineage("main").consecutive_failed == 1
    assert not c.failures_exhausted()
    b2 = c.begin_epoch(DIAMOND, "r2")
    c.abort(b2.epoch_id, "validation_failed", "delays out of range")
    assert c.failures_exhausted()
    run_epoch(c, tmp=tmp_path)
    assert c.registry().lineage("main").consecutive_failed == 0


def test_timeout_aborts_once_and_names_missing_tasks(storage, tmp_path):
    clock = FakeClock()
    alerts = []
    c = Coordinator(storage, "p", CheckpointConfig(timeout_seconds=60), clock=clock,
                    on_abort=lambda m, b: alerts.append(m))
    b = c.begin_epoch(DIAMOND, "r")
    ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)
    clock.advance(59)
    assert c.expire_overdue() == [] and c.status(b.epoch_id) == "pending"
    clock.advance(2)
    other = Coordinator(storage, "p", CheckpointConfig(timeout_seconds=60), clock=clock,
                        on_abort=lambda m, b: alerts.append(m))
    decided = c.expire_overdue() + other.expire_overdue()
    assert len(decided) == 1 and len(alerts) == 1
    assert decided[0].reason == "timeout"
    assert decided[0].missing_tasks == ("join", "sink", "src_b")


def test_an_ended_run_has_its_pending_epochs_cancelled_and_frees_its_slot(storage, tmp_path):
    """A DAG run marked failed by an operator: the epochs it opened (any lineage) are
    aborted as cancelled at once, not at their timeout; other runs' epochs and decided ones
    are left; the failure budget is not spent, and the lineage's slot is free again."""
    alerts = []
    c = Coordinator(storage, "p", CheckpointConfig(tolerable_failed_epochs=0),
                    on_abort=lambda m, b: alerts.append(m))
    done = run_epoch(c, run_id="r1", tmp=tmp_path)
    b = c.begin_epoch(DIAMOND, "r1")  # the run cleared and begun again
    ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)
    side = c.begin_epoch(DIAMOND, "r1", lineage="backfill")
    other = c.begin_epoch(DIAMOND, "r2", lineage="other")
    with pytest.raises(TooManyConcurrentEpochs):
        c.begin_epoch(DIAMOND, "r3")
    decided = c.abort_run("r1", "its DAG run was marked failed")
    assert [m.epoch_id for m in decided] == [b.epoch_id, side.epoch_id]
    assert {(m.status, m.reason) for m in decided} == {("aborted", "cancelled")}
    assert decided[0].missing_tasks == ("join", "sink", "src_b")
    assert "marked failed" in decided[0].detail and len(alerts) == 2
    assert c.status(done.epoch_id) == "completed" and c.status(other.epoch_id) == "pending"
    assert c.abort_run("r1", "again") == [] and len(alerts) == 2
    assert c.registry().lineage("main").consecutive_failed == 0
    assert c.begin_epoch(DIAMOND, "r3").parent_epoch_id == done.epoch_id


def test_overdue_but_fully_acked_epoch_is_completed(storage, tmp_path):
    clock = FakeClock()
    c = Coordinator(storage, "p", CheckpointConfig(timeout_seconds=10), clock=clock)
    b = c.begin_epoch(DIAMOND, "r")
    for t in DIAMOND:
        ack_task(c, b.epoch_id, t, tmp=tmp_path, outputs={"gold": b"1"} if t == "sink" else None)
    clock.advance(11)  # the coordinator "died" before completing
    [meta] = c.expire_overdue()
    assert meta.completed and c.latest_completed() == b.epoch_id


def test_max_concurrent_and_min_pause(storage, tmp_path):
    clock = FakeClock()
    c = Coordinator(storage, "p", CheckpointConfig(max_concurrent_epochs=2,
                                                   min_pause_seconds=30), clock=clock)
    c.begin_epoch(DIAMOND, "r1")
    with pytest.raises(MinPauseNotElapsed) as info:
        c.begin_epoch(DIAMOND, "r2")
    assert info.value.retry_after == pytest.approx(30)
    clock.advance(31)
    c.begin_epoch(DIAMOND, "r2")
    clock.advance(31)
    with pytest.raises(TooManyConcurrentEpochs, match=r"\[1, 2\]"):
        c.begin_epoch(DIAMOND, "r3")
    assert c.registry().last_epoch_id == 2  # refused begins burn no id


def test_alignment_refuses_before_upstream_acks(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)
    with pytest.raises(AlignmentError, match=r"\['src_b'\]"):
        c.upstream_handles(b.epoch_id, "join")
    ack_task(c, b.epoch_id, "src_b", tmp=tmp_path)
    ups = c.upstream_handles(b.epoch_id, "join")
    assert {h.epoch_id for h in ups.values()} == {b.epoch_id}  # never epoch N-1


def test_restore_handle_comes_from_parent(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path, payload=b"epoch1-")
    b2 = c.begin_epoch(DIAMOND, "r2")
    h = c.restore_handle(b2.epoch_id, "src_a")
    assert h.epoch_id == 1 and h.offsets == {"epoch": 1}
    first = Coordinator(storage, "fresh").begin_epoch(DIAMOND, "r")
    assert Coordinator(storage, "fresh").restore_handle(first.epoch_id, "src_a") is None


def test_explicit_parent_with_unmapped_state_is_refused(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path)
    renamed = {"src_a": TaskPlan(), "src_b_v2": TaskPlan()}
    with pytest.raises(RestoreMappingError, match=r"\['join', 'sink', 'src_b'\]"):
        c.begin_epoch(renamed, "r", parent_epoch_id=1)
    b = c.begin_epoch(renamed, "r", parent_epoch_id=1, allow_non_restored_state=True)
    assert b.parent_epoch_id == 1


def test_crash_between_completion_and_registry_update_recovers(storage, tmp_path):
    """_metadata written, then the process died: no publish, no pointer update."""
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    for t in DIAMOND:
        ack_task(c, b.epoch_id, t, tmp=tmp_path, outputs={"gold": b"1"} if t == "sink" else None)
    c._finisher.finish = lambda meta, barrier: None  # simulate the crash right after _metadata
    assert c.complete(b.epoch_id).completed
    assert read_manifest(storage, c.layout) is None
    fresh = Coordinator(storage, "p")
    assert fresh.latest_completed() == b.epoch_id  # the probe sees past the lagging pointer
    assert fresh.registry().lineage("main").latest_completed is None
    b2 = fresh.begin_epoch(DIAMOND, "r2")  # begin recovers
    assert read_manifest(storage, c.layout).epoch_id == b.epoch_id
    assert b2.parent_epoch_id == b.epoch_id
    assert fresh.registry().lineage("main").latest_completed == b.epoch_id


def test_burned_id_is_never_reused_and_expires(storage, tmp_path):
    clock = FakeClock()
    c = Coordinator(storage, "p", CheckpointConfig(timeout_seconds=5), clock=clock)
    # Allocate an id, then "crash" before writing the barrier.
    from dataclasses import replace

    from checkpointing.protocol.registry import OpenEpoch

    def burn(reg):
        e = OpenEpoch(reg.last_epoch_id + 1, "main", "2023-11-14T22:13:20.000Z",
                      "2023-11-14T22:13:25.000Z")
        return replace(reg, last_epoch_id=e.epoch_id, open=(*reg.open, e)), None

    c.store.update_registry(burn)
    clock.advance(10)
    b = c.begin_epoch(DIAMOND, "r")  # expires the burned epoch first
    assert b.epoch_id == 2
    assert c.metadata(1).reason == "timeout"


def test_run_reclaims_the_id_its_crashed_begin_burned(storage, tmp_path):
    c = Coordinator(storage, "p")
    real_create = storage.create

    def crash_on_barrier(key, data):
        if key.endswith("barrier.json"):
            raise RuntimeError("killed between allocation and barrier")
        return real_create(key, data)

    storage.create = crash_on_barrier
    with pytest.raises(RuntimeError):
        c.begin_epoch(DIAMOND, "run-a")
    storage.create = real_create
    assert [(o.epoch_id, o.run_id) for o in c.registry().open] == [(1, "run-a")]
    # Another run is still refused (the id is run-a's and pending) ...
    with pytest.raises(TooManyConcurrentEpochs):
        Coordinator(storage, "p").begin_epoch(DIAMOND, "run-b")
    # ... while run-a's next try completes that same id instead of waiting for expiry.
    b = Coordinator(storage, "p").begin_epoch(DIAMOND, "run-a")
    assert b.epoch_id == 1 and b.run_id == "run-a"
    assert c.registry().last_epoch_id == 1
    for t in DIAMOND:
        ack_task(c, 1, t, tmp=tmp_path)
    assert c.complete(1).completed


def test_malformed_and_foreign_metadata_refused_not_overwritten(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path)
    key = c.layout.counter
    storage.write(key, b'{"format": "ckpt.registry", "protocol_version": "2.0"}')
    with pytest.raises(UnsupportedVersion, match="protocol version 2.0"):
        Coordinator(storage, "p").begin_epoch(DIAMOND, "r")
    assert storage.read(key)[0] == b'{"format": "ckpt.registry", "protocol_version": "2.0"}'
    storage.write(key, b'{"format": "ckpt.regi')
    with pytest.raises(MalformedDocument, match="not valid JSON"):
        Coordinator(storage, "p").latest_completed()
    assert storage.read(key)[0] == b'{"format": "ckpt.regi'
    storage.write(c.layout.metadata(1), b"\x00\xffgarbage")
    with pytest.raises(MalformedDocument):
        Coordinator(storage, "p").metadata(1)
    # A minor version from the future with extra fields is accepted.
    storage.write(key, b'{"format":"ckpt.registry","protocol_version":"1.11","last_epoch_id":1,'
                       b'"open":[],"lineages":{},"added_in_1_11":true}')
    assert Coordinator(storage, "p").registry().last_epoch_id == 1


def test_deleted_registry_does_not_reuse_ids(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path)
    run_epoch(c, tmp=tmp_path)
    storage.delete(c.layout.counter)
    assert Coordinator(storage, "p").begin_epoch(DIAMOND, "r").epoch_id == 3


def test_failure_budget_is_checked_where_an_abort_is_decided(local_storage):
    """tolerable_failed_epochs: the run that sees one failure too many fails; begin never
    refuses (only a completed epoch resets the count, so refusing would block for good)."""
    from checkpointing import CheckpointConfig
    from checkpointing.errors import FailureBudgetExhausted

    c = Coordinator(local_storage, "p", CheckpointConfig(tolerable_failed_epochs=1))
    for i in range(3):
        e = c.begin_epoch(DIAMOND, f"r{i}").epoch_id
        c.abort(e, "declined", "bad data", declined_by="src_a")
        if i == 0:
            c.check_failures()  # one failure is tolerated
    with pytest.raises(FailureBudgetExhausted, match="3 consecutive failed epoch"):
        c.check_failures()
    e = c.begin_epoch(DIAMOND, "r-next").epoch_id  # the next run still begins
    assert c.status(e) == "pending"


def test_the_last_leaf_acknowledgement_completes_the_epoch(storage, tmp_path):
    """The coordinator completes the epoch on the last acknowledgement of a leaf task
    (PROTOCOL 6.5, 1.10): outputs publish without waiting for the commit step. A task with
    downstream tasks never completes it, and a leaf acknowledging before the others leaves
    it pending."""
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    leaves = [t for t in DIAMOND if not any(t in tp.upstream for tp in DIAMOND.values())]
    inner = [t for t in DIAMOND if t not in leaves]
    order = [*inner[:-1], *leaves, inner[-1]]  # an inner task acknowledges last
    for task in order:
        tp = DIAMOND[task]
        r = ack_task(c, b.epoch_id, task, files={"state": task.encode()},
                     outputs={"gold": b"g"} if tp.publishes else None, tmp=tmp_path,
                     complete=True)
        assert r.completed is None and c.metadata(b.epoch_id) is None  # not a leaf's
    # a leaf's, the last (a retry acknowledging again: a duplicate that completes it)
    r = c.acknowledge(b.epoch_id, leaves[0], 1, StateHandle(leaves[0], b.epoch_id, 1),
                      complete=True)
    assert r.status == AckStatus.DUPLICATE and r.completed.completed
    assert c.metadata(b.epoch_id).completed
    assert read_manifest(storage, c.layout).epoch_id == b.epoch_id
