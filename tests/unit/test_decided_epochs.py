"""A decided epoch stays decided for every reader after retention deleted its files
(PROTOCOL 6.10), on the filesystem and on the S3 server: late acknowledgements, start
markers, declines and lease renewals are refused with "epoch N was aborted (reason)" and
write nothing; an operator's cancellation does not spend the failure budget; a pipeline id
is owned by one DAG; retention removes what a late writer left and refuses to guess a
pending epoch's parent. Also the lease's clock and the local store's shard-directory race."""

from __future__ import annotations

import threading

import pytest

from checkpointing import (
    CheckpointConfig,
    Coordinator,
    LocalStorage,
    StateHandle,
    run_retention,
)
from checkpointing.coordination.lease import RunnerLease
from checkpointing.errors import (
    EpochAlreadyDecided,
    EpochNotFound,
    FailureBudgetExhausted,
    MalformedDocument,
    PipelineOwnedElsewhere,
)
from checkpointing.protocol.history import prune_history
from tests.support.helpers import DIAMOND, ack_task, run_epoch


def _objects(storage, prefix: str) -> list[str]:
    return [o.key for o in storage.list(prefix)]


def _aborted_and_deleted(c: Coordinator, tmp) -> int:
    """Epoch 1 completes, epoch 2 is aborted by an operator and deleted by retention."""
    run_epoch(c, tmp=tmp, run_id="r1")
    b = c.begin_epoch(DIAMOND, "r2")
    ack_task(c, b.epoch_id, "src_a", files={"s": b"a"}, tmp=tmp)
    c.abort(b.epoch_id, "cancelled", "aborted by admin: wrong day")
    assert b.epoch_id in run_retention(c).deleted_epochs
    assert _objects(c.storage, c.layout.epoch_prefix(b.epoch_id)) == []
    return b.epoch_id


def test_writes_into_an_aborted_and_deleted_epoch_are_refused(storage, tmp_path):
    c = Coordinator(storage, "p")
    epoch = _aborted_and_deleted(c, tmp_path)
    late = Coordinator(storage, "p")  # a process that never saw the epoch's barrier
    for attempt_call in (
        lambda co: co.acknowledge(epoch, "src_b", 1, StateHandle("src_b", epoch, 1)),
        lambda co: co.register_attempt(epoch, "src_b", 2),
        lambda co: co.decline(epoch, "src_b", 1, "bad rows"),
    ):
        with pytest.raises(EpochAlreadyDecided,
                           match=rf"^epoch {epoch} was aborted \(cancelled: aborted by admin"):
            attempt_call(late)
    assert _objects(storage, c.layout.epoch_prefix(epoch)) == []
    d = late.decision(epoch)
    assert (d.status, d.source, d.reason) == ("aborted", "history", "cancelled")
    assert late.status(epoch) == "aborted"
    # A second decision is never written into the deleted epoch.
    assert late.abort(epoch, "timeout").reason == "cancelled"
    assert late.try_complete(epoch).status == "aborted"
    assert _objects(storage, c.layout.epoch_prefix(epoch)) == []


def test_ack_refused_even_with_the_barrier_cached(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    task_side = Coordinator(storage, "p")
    task_side.register_attempt(b.epoch_id, "src_a", 1)  # caches the barrier, as a task does
    c.abort(b.epoch_id, "cancelled", "operator")
    run_retention(c)
    with pytest.raises(EpochAlreadyDecided, match=f"epoch {b.epoch_id} was aborted"):
        task_side.acknowledge(b.epoch_id, "src_a", 1, StateHandle("src_a", b.epoch_id, 1))
    assert _objects(storage, c.layout.epoch_prefix(b.epoch_id)) == []


def test_decision_after_the_failure_record_is_pruned_comes_from_the_registry(local_storage,
                                                                           tmp_path):
    c = Coordinator(local_storage, "p")
    epoch = _aborted_and_deleted(c, tmp_path)
    prune_history(local_storage, c.layout, keep=0)
    d = c.decision(epoch)
    assert (d.status, d.source) == ("decided", "registry")
    with pytest.raises(EpochAlreadyDecided, match=f"epoch {epoch} was decided earlier"):
        c.acknowledge(epoch, "src_b", 1, StateHandle("src_b", epoch, 1))
    with pytest.raises(EpochNotFound):
        c.decision(epoch + 100)  # never allocated: unknown, not decided
    assert c.status(epoch + 100) == "unknown"


def test_cancellations_do_not_spend_the_failure_budget(local_storage, tmp_path):
    c = Coordinator(local_storage, "p", CheckpointConfig(tolerable_failed_epochs=0))
    run_epoch(c, tmp=tmp_path, run_id="r1")
    for i, reason in enumerate(("cancelled", "superseded", "runner_lost")):
        b = c.begin_epoch(DIAMOND, f"c{i}")
        c.abort(b.epoch_id, reason, "not a failure")
        c.check_failures()  # does not raise
        assert c.registry().lineage("main").consecutive_failed == 0
    b = c.begin_epoch(DIAMOND, "t1")
    c.abort(b.epoch_id, "timeout")
    with pytest.raises(FailureBudgetExhausted, match="1 consecutive failed"):
        c.check_failures()
    b = c.begin_epoch(DIAMOND, "c9")
    c.abort(b.epoch_id, "cancelled")  # neither counts nor resets the count
    assert c.registry().lineage("main").consecutive_failed == 1
    run_epoch(c, tmp=tmp_path, run_id="ok")
    assert c.registry().lineage("main").consecutive_failed == 0


def test_a_pipeline_id_belongs_to_one_dag(local_storage, tmp_path):
    a = Coordinator(local_storage, "shared")
    b = a.begin_epoch(DIAMOND, "r1", owner="dag_a")
    assert a.registry().owner == "dag_a"
    with pytest.raises(PipelineOwnedElsewhere, match="checkpointed by DAG 'dag_a'"):
        Coordinator(local_storage, "shared").begin_epoch(DIAMOND, "r2", owner="dag_b")
    assert a.registry().last_epoch_id == b.epoch_id  # the refusal allocated nothing


def test_retention_deletes_what_a_late_writer_left(local_storage, tmp_path):
    c = Coordinator(local_storage, "p")
    epoch = _aborted_and_deleted(c, tmp_path)
    # A writer of before 1.7 (no decision check) acked into the deleted epoch.
    stray = c.layout.attempt_object(epoch, "src_b", 1, "ack")
    local_storage.write(stray, b"{}")
    report = run_retention(c)
    assert epoch in report.deleted_epochs
    assert _objects(local_storage, c.layout.epoch_prefix(epoch)) == []


def test_retention_refuses_to_guess_a_pending_epochs_parent(local_storage, tmp_path):
    c = Coordinator(local_storage, "p", CheckpointConfig(retained_epochs=1))
    run_epoch(c, tmp=tmp_path, run_id="r1")
    pending = c.begin_epoch(DIAMOND, "r2")
    local_storage.write(c.layout.barrier(pending.epoch_id), b"{not json")
    fresh = Coordinator(local_storage, "p", CheckpointConfig(retained_epochs=1))
    with pytest.raises(MalformedDocument):
        run_retention(fresh)
    assert c.metadata(1) is not None  # the parent epoch is still there


def test_lease_renewal_stops_once_the_epoch_is_decided(storage):
    c = Coordinator(storage, "p", CheckpointConfig(lease_seconds=30))
    b = c.begin_epoch(DIAMOND, "r")
    lease = RunnerLease(c, b.epoch_id)
    assert lease.renew()
    c.abort(b.epoch_id, "cancelled", "operator")
    run_retention(c)
    assert not lease.renew()  # writes nothing into the deleted epoch
    assert lease.decided.status == "aborted"
    assert _objects(storage, c.layout.epoch_prefix(b.epoch_id)) == []


def test_local_store_survives_a_concurrent_delete_of_its_shard_directory(tmp_path):
    """delete() prunes directories it empties; a create/upload into the same directory in
    between its mkdir and its link must not fail with a raw FileNotFoundError."""
    store = LocalStorage(tmp_path / "s")
    src = tmp_path / "src"
    src.write_bytes(b"payload")
    errors: list[BaseException] = []
    stop = threading.Event()

    def churn(i: int) -> None:
        n = 0
        try:
            while not stop.is_set() and n < 400:
                key = f"shared/ab/{i}-{n}"
                if n % 2:
                    store.upload_file(key, str(src))
                else:
                    store.create(key, b"x")
                store.delete(key)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert list(store.list("shared/")) == []
    assert list((tmp_path / "s" / ".ckpt-tmp").iterdir()) == []


def test_a_failed_upload_leaves_no_temp_file(tmp_path):
    store = LocalStorage(tmp_path / "s")
    with pytest.raises(FileNotFoundError):
        store.upload_file("shared/ab/x", str(tmp_path / "missing"))
    assert list((tmp_path / "s" / ".ckpt-tmp").iterdir()) == []
