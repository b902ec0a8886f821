"""Incremental state, restore verification, two-phase publish, savepoints, retention."""

from __future__ import annotations

import time

import pytest

from checkpointing import (
    CheckpointConfig,
    Coordinator,
    SnapshotWriter,
    create_savepoint,
    delete_savepoint,
    list_savepoints,
    read_manifest,
    restore_files,
    run_retention,
    verify_epoch,
)
from checkpointing.errors import IntegrityError, SavepointExists, SavepointNotFound
from checkpointing.protocol.barrier import TaskPlan
from tests.support.helpers import DIAMOND, ack_task, run_epoch

ONE = {"t": TaskPlan(publishes=True)}


def _snapshot(c, epoch, parts: dict[str, bytes], tmp, previous=None, attempt=1):
    c.register_attempt(epoch, "t", attempt)
    w = SnapshotWriter(c.storage, c.layout, epoch, "t", attempt, previous=previous)
    d = tmp / f"state-{epoch}-{attempt}"
    for name, data in parts.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    w.add_directory(d)
    return w, c.acknowledge(epoch, "t", attempt, w.handle()).acknowledgement


def test_incremental_snapshot_uploads_only_changed_files(storage, tmp_path):
    c = Coordinator(storage, "p")
    parts = {f"route=R{i}/part-0.parquet": bytes([i]) * 10_000 for i in range(10)}
    b1 = c.begin_epoch(ONE, "r1")
    w1, _ = _snapshot(c, b1.epoch_id, parts, tmp_path)
    c.complete(b1.epoch_id)
    assert w1.bytes_written == 100_000

    parts["route=R3/part-0.parquet"] = b"changed" * 1000  # one partition changes
    b2 = c.begin_epoch(ONE, "r2")
    prev = c.restore_handle(b2.epoch_id, "t")
    w2, ack2 = _snapshot(c, b2.epoch_id, parts, tmp_path, previous=prev)
    c.complete(b2.epoch_id)
    assert w2.bytes_written == 7000 and w2.bytes_referenced == 90_000
    assert ack2.state_handle.state_size == 97_000
    # Restoring epoch 2 yields exactly the current files.
    out = tmp_path / "restored"
    restore_files(storage, ack2.state_handle, out)
    for name, data in parts.items():
        assert (out / name).read_bytes() == data


def test_restore_detects_corruption_and_missing_files(storage, tmp_path):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(ONE, "r")
    _, ack = _snapshot(c, b.epoch_id, {"a": b"aaaa", "b": b"bbbb"}, tmp_path)
    c.complete(b.epoch_id)
    assert verify_epoch(c, b.epoch_id).ok
    ref = ack.state_handle.files[0]
    storage.write(storage.key_for_uri(ref.uri), b"AAAA")  # same size, other bytes
    with pytest.raises(IntegrityError, match="is corrupt"):
        restore_files(storage, ack.state_handle, tmp_path / "r1")
    report = verify_epoch(c, b.epoch_id)
    assert not report.ok and len(report.problems) == 1 and "'a'" in report.problems[0]
    storage.delete(storage.key_for_uri(ack.state_handle.files[1].uri))
    assert len(verify_epoch(c, b.epoch_id).problems) == 2


def test_outputs_invisible_until_epoch_completes_and_publish_is_idempotent(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path, payload=b"v1")
    b = c.begin_epoch(DIAMOND, "r2")
    for t in ("src_a", "src_b", "join"):
        ack_task(c, b.epoch_id, t, tmp=tmp_path)
    ack_task(c, b.epoch_id, "sink", outputs={"gold": b"v2"}, tmp=tmp_path)
    m = read_manifest(storage, c.layout)
    assert m.epoch_id == 1  # staged, not published: readers still see epoch 1
    c.complete(b.epoch_id)
    m = read_manifest(storage, c.layout)
    assert m.epoch_id == 2
    f = m.outputs["gold"].files[0]
    assert storage.read(storage.key_for_uri(f.uri))[0] == b"v2"
    from checkpointing.records.two_phase_publish import publish
    again = publish(storage, c.layout, 1, "main", {}, 0.0)  # an old epoch, late
    assert again.epoch_id == 2 and read_manifest(storage, c.layout).epoch_id == 2


def test_savepoints_survive_retention_and_restore(storage, tmp_path):
    c = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1))
    b = c.begin_epoch(ONE, "r1")
    _snapshot(c, b.epoch_id, {"s": b"state-of-epoch-1"}, tmp_path)
    c.complete(b.epoch_id)
    sp = create_savepoint(c, "before-upgrade", b.epoch_id)
    with pytest.raises(SavepointExists):
        create_savepoint(c, "before-upgrade", b.epoch_id)
    for i in range(3):
        b = c.begin_epoch(ONE, f"r{i + 2}")
        _snapshot(c, b.epoch_id, {"s": f"state-{i}".encode()}, tmp_path,
                  previous=c.restore_handle(b.epoch_id, "t"))
        c.complete(b.epoch_id)
    report = run_retention(c)
    assert report.deleted_epochs == [1, 2, 3] and report.kept_epochs == [4]
    assert [s.name for s in list_savepoints(storage, c.layout)] == ["before-upgrade"]
    restored = c.begin_epoch(ONE, "from-sp", parent_savepoint="before-upgrade",
                             lineage="backfill1")
    h = c.restore_handle(restored.epoch_id, "t")
    restore_files(storage, h, tmp_path / "sp")
    assert (tmp_path / "sp" / "s").read_bytes() == b"state-of-epoch-1"
    assert h == sp.acks["t"].state_handle
    delete_savepoint(storage, c.layout, "before-upgrade")
    with pytest.raises(SavepointNotFound):
        delete_savepoint(storage, c.layout, "before-upgrade")


def test_retention_never_deletes_referenced_shared_files(storage, tmp_path):
    c = Coordinator(storage, "p", CheckpointConfig(retained_epochs=2))
    clock_now = [time.time()]  # file mtimes are real, so the fake clock starts now
    c.clock = lambda: clock_now[0]
    prev = None
    unchanged = b"unchanged partition" * 100
    for i in range(5):
        b = c.begin_epoch(ONE, f"r{i}")
        _, ack = _snapshot(c, b.epoch_id, {"base": unchanged, "delta": f"d{i}".encode()},
                           tmp_path, previous=prev)
        prev = ack.state_handle
        c.complete(b.epoch_id)
        clock_now[0] += 3600
    aborted = c.begin_epoch(ONE, "doomed")
    _snapshot(c, aborted.epoch_id, {"junk": b"junk"}, tmp_path)
    c.abort(aborted.epoch_id, "cancelled")
    clock_now[0] += 3600
    report = run_retention(c)
    assert report.kept_epochs == [4, 5]
    assert 6 in report.deleted_epochs
    # "base" was uploaded in epoch 1 and is still referenced by epochs 4 and 5.
    for e in (4, 5):
        assert verify_epoch(c, e).ok
    assert report.deleted_shared == 4  # d0, d1, d2 and the aborted epoch's junk
    assert not list(storage.list(c.layout.epoch_prefix(6)))  # aborted: nothing left


def test_retention_keeps_files_of_epoch_in_flight(storage, tmp_path):
    c = Coordinator(storage, "p")
    b1 = c.begin_epoch(ONE, "r1")
    _snapshot(c, b1.epoch_id, {"s": b"one"}, tmp_path)
    c.complete(b1.epoch_id)
    b2 = c.begin_epoch(ONE, "r2")
    _snapshot(c, b2.epoch_id, {"s": b"two"}, tmp_path)  # acked, not yet completed
    run_retention(c)
    c.complete(b2.epoch_id)
    assert verify_epoch(c, b2.epoch_id).ok


def test_retention_keeps_acked_files_of_pending_epoch_despite_clock_skew(storage, tmp_path):
    """Found by the stateful test: with the coordinator's clock far ahead of the storage's
    mtimes, a pending epoch's acknowledged shared file must still be kept."""
    c = Coordinator(storage, "p")
    c.clock = lambda: time.time() + 10 * 86400
    b = c.begin_epoch(ONE, "r")
    _, ack = _snapshot(c, b.epoch_id, {"s": b"in flight"}, tmp_path)
    report = run_retention(c)
    assert report.deleted_shared == 0
    assert storage.exists(storage.key_for_uri(ack.state_handle.files[0].uri))


def test_corrupt_latest_epoch_falls_back_to_an_older_one(storage, tmp_path):
    c = Coordinator(storage, "p", config=CheckpointConfig(retained_epochs=3))
    acks = []
    for i in range(3):
        b = c.begin_epoch(ONE, f"r{i}")
        prev = c.restore_handle(b.epoch_id, "t")
        _, ack = _snapshot(c, b.epoch_id, {"s": f"state-{i}".encode()}, tmp_path, previous=prev)
        c.complete(b.epoch_id)
        acks.append(ack)
    # Epoch 3's file is flipped (same size), epoch 2's is deleted: begin skips both.
    ref3, ref2 = acks[2].state_handle.files[0], acks[1].state_handle.files[0]
    storage.write(storage.key_for_uri(ref3.uri), b"STATE-2")
    storage.delete(storage.key_for_uri(ref2.uri))
    b4 = c.begin_epoch(ONE, "r4")
    assert b4.parent_epoch_id == 1
    assert [s["epoch_id"] for s in b4.restore_fallback] == [3, 2]
    assert "corrupt" in b4.restore_fallback[0]["problems"][0]
    assert "missing" in b4.restore_fallback[1]["problems"][0]
    assert c.barrier(b4.epoch_id).restore_fallback == b4.restore_fallback  # stored
    assert c.restore_handle(b4.epoch_id, "t").files[0].sha256 == \
        acks[0].state_handle.files[0].sha256
    # Nothing was rewritten: epoch 3 stays completed, its bad bytes untouched.
    assert c.status(3) == "completed"
    assert storage.read(storage.key_for_uri(ref3.uri))[0] == b"STATE-2"
    c.abort(b4.epoch_id, "superseded")
    # When no epoch verifies, the new epoch starts from empty state.
    storage.write(storage.key_for_uri(acks[0].state_handle.files[0].uri), b"xxxxxxx")
    b5 = c.begin_epoch(ONE, "r5")
    assert b5.parent_epoch_id is None and len(b5.restore_fallback) == 3


def _count_checks(storage, monkeypatch) -> tuple[list[str], list[str]]:
    """(names of the files a verification downloads and hashes, keys it matches by the
    store's own checksum), filled as begins verify."""
    import checkpointing.state.verify as verify

    hashed: list[str] = []
    real = verify.download_verified
    monkeypatch.setattr(verify, "download_verified",
                        lambda st, ref, target: (hashed.append(ref.name), real(st, ref, target)))
    by_store: list[str] = []
    real_sha = storage.stored_sha256

    def stored_sha256(key):
        found = real_sha(key)
        if found is not None:
            by_store.append(key)
        return found

    monkeypatch.setattr(storage, "stored_sha256", stored_sha256)
    return hashed, by_store


def test_restore_verification_hashes_only_what_changed_since_its_record(storage, tmp_path,
                                                                       monkeypatch):
    """Each epoch adds one state file to the ones before; the check before each restore
    hashes the one new file and checks the others by size and stamp against the parent's
    verification record (5.16): on a filesystem without reading their bytes (no md5 of
    them either). On S3 the new file is not downloaded either: the SHA-256 S3 kept at its
    upload is compared (1.15). A recorded file rewritten with other bytes of the same size
    is still caught: its stamp changed, and its checksum (none, or the new bytes')."""
    import checkpointing.state.verify as verify
    import checkpointing.storage.local as local

    hashed, by_store = _count_checks(storage, monkeypatch)
    md5_read: list[object] = []
    real_md5 = local._file_etag
    monkeypatch.setattr(local, "_file_etag", lambda p: (md5_read.append(p), real_md5(p))[1])
    c = Coordinator(storage, "p", config=CheckpointConfig(retained_epochs=10))
    parts: dict[str, bytes] = {}
    first_file = None
    on_s3 = not isinstance(storage, local.LocalStorage)
    for i in range(5):
        hashed.clear()
        by_store.clear()
        md5_read.clear()
        b = c.begin_epoch(ONE, f"r{i}")
        assert b.parent_epoch_id == (i or None) and not b.restore_fallback
        # The parent's one new file: by S3's checksum on S3, hashed on a filesystem.
        assert len(by_store if on_s3 else hashed) == (1 if i else 0), (i, hashed, by_store)
        assert not (hashed if on_s3 else by_store)
        assert not md5_read
        if i >= 2:
            record = verify.read_record(storage, c.layout, i)
            assert record is not None and len(record.files) == i
            prefix = "stat:" if isinstance(storage, local.LocalStorage) else "etag:"
            assert all(f.stamp and f.stamp.startswith(prefix) for f in record.files.values())
        parts[f"s{i}"] = f"state-{i}".encode()
        w, ack = _snapshot(c, b.epoch_id, parts, tmp_path,
                           previous=c.restore_handle(b.epoch_id, "t"))
        assert w.bytes_written == len(parts[f"s{i}"])  # incremental: one new file
        first_file = first_file or ack.state_handle.files[0]
        c.complete(b.epoch_id)
    # s0, referenced by every epoch, rewritten in place with as many bytes.
    storage.write(storage.key_for_uri(first_file.uri), b"STATE-0")
    hashed.clear()
    b6 = c.begin_epoch(ONE, "r6")
    assert b6.parent_epoch_id is None
    assert [f["epoch_id"] for f in b6.restore_fallback] == [5, 4, 3, 2, 1]
    assert all("corrupt" in f["problems"][0] for f in b6.restore_fallback)
    # An epoch that fails verification gets no record.
    assert verify.read_record(storage, c.layout, 5) is None


def test_a_record_of_etags_is_hashed_once_then_stamped(storage, tmp_path, monkeypatch):
    """Upgrade (PROTOCOL 1.12): a 1.6-1.11 record lists etags, which are not stamps; the
    begin after it hashes every file once and records stamps, and the begin after that
    hashes only the new file."""
    import json

    import checkpointing.state.verify as verify

    hashed, by_store = _count_checks(storage, monkeypatch)
    c = Coordinator(storage, "p", config=CheckpointConfig(retained_epochs=10))
    parts: dict[str, bytes] = {}
    for i in range(3):
        b = c.begin_epoch(ONE, f"r{i}")
        parts[f"s{i}"] = f"state-{i}".encode()
        _snapshot(c, b.epoch_id, parts, tmp_path, previous=c.restore_handle(b.epoch_id, "t"))
        c.complete(b.epoch_id)
    # Epoch 2's record, as a 1.11 writer made it: etags.
    key = c.layout.verified(2)
    doc = json.loads(storage.read(key)[0])
    assert len(doc["files"]) == 2
    storage.delete(key)
    doc["protocol_version"] = "1.11"
    doc["files"] = {u: {"size": f["size"], "sha256": f["sha256"], "etag": "e"}
                    for u, f in doc["files"].items()}
    storage.create(key, json.dumps(doc).encode())
    hashed.clear()
    by_store.clear()
    b4 = c.begin_epoch(ONE, "r3")  # verifies epoch 3 against epoch 2's old record
    assert len(hashed + by_store) == 3, (hashed, by_store)
    assert all(f.stamp for f in verify.read_record(storage, c.layout, 3).files.values())
    c.abort(b4.epoch_id, "superseded")
    hashed.clear()
    by_store.clear()
    c.begin_epoch(ONE, "r4")  # epoch 3's own record now: nothing new to check
    assert hashed == [] and by_store == []


def test_verification_checks_files_in_parallel_and_names_each_problem(storage, tmp_path,
                                                                      monkeypatch):
    """A begin's checks of the files an epoch added (a download, or a HEAD for the store's
    checksum: a round trip each) run ``parallel_checks`` at a time, and every bad file is
    named, in the handle's order, while the good ones still verify."""
    import threading

    import checkpointing.state.verify as verify
    from checkpointing.state.verify import verify_handles

    monkeypatch.setattr(storage, "parallel_checks", 4)
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slowed(fn):
        def call(*args):
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            try:
                time.sleep(0.05)  # a round trip's worth, so that overlapping calls show
                return fn(*args)
            finally:
                with lock:
                    in_flight[0] -= 1
        return call

    monkeypatch.setattr(verify, "download_verified", slowed(verify.download_verified))
    monkeypatch.setattr(storage, "stored_sha256", slowed(storage.stored_sha256))
    c = Coordinator(storage, "p")
    b = c.begin_epoch(ONE, "r1")
    parts = {f"day={i:02d}/part-0.parquet": bytes([i]) * 1000 for i in range(12)}
    _, ack = _snapshot(c, b.epoch_id, parts, tmp_path)
    c.complete(b.epoch_id)
    files = {f.name: f for f in ack.state_handle.files}
    bad = ["day=03/part-0.parquet", "day=09/part-0.parquet"]
    for name in bad:  # the same size, other bytes
        storage.write(storage.key_for_uri(files[name].uri), b"x" * 1000)

    report = verify_handles(storage, b.epoch_id, c.completed_handles(b.epoch_id))
    assert peak[0] > 1
    assert len(report.problems) == 2, report.problems
    assert all(n in p for n, p in zip(bad, report.problems, strict=True)), report.problems
    assert report.files_checked + report.files_checked_by_store == 10
    assert sorted(report.verified) == sorted(f.uri for n, f in files.items() if n not in bad)


def test_verify_restore_off_keeps_the_latest_parent(storage, tmp_path):
    c = Coordinator(storage, "p", config=CheckpointConfig(verify_restore=False))
    b = c.begin_epoch(ONE, "r1")
    _, ack = _snapshot(c, b.epoch_id, {"s": b"state"}, tmp_path)
    c.complete(b.epoch_id)
    storage.write(storage.key_for_uri(ack.state_handle.files[0].uri), b"STATE")
    assert c.begin_epoch(ONE, "r2").parent_epoch_id == 1


def test_publish_follows_the_lineage_rule(storage):
    """Forward-only within a lineage; an epoch of another lineage publishes whatever its id
    (a pending main epoch that completes after a backfill lineage published)."""
    from checkpointing.protocol.state_handle import OutputRef
    from checkpointing.records.two_phase_publish import publish

    c = Coordinator(storage, "p")
    out = {"gold": OutputRef((), 0, {})}
    assert publish(storage, c.layout, 1, "main", out, 0.0).epoch_id == 1
    assert publish(storage, c.layout, 3, "backfill-x", out, 1.0).epoch_id == 3
    m = publish(storage, c.layout, 2, "main", out, 2.0)
    assert (m.epoch_id, m.lineage) == (2, "main")
    assert publish(storage, c.layout, 1, "main", out, 3.0).epoch_id == 2  # older: ignored
    assert publish(storage, c.layout, 3, "backfill-x", out, 4.0).epoch_id == 2  # published once
    assert [h["epoch_id"] for h in read_manifest(storage, c.layout).history] == [1, 3, 2]


def test_state_uploaded_and_outputs_staged_are_separate_figures(tmp_path):
    """Flink's incremental size is state only: a handle's ``bytes_written`` splits into
    the state it uploaded and the outputs it staged for publication."""
    from checkpointing import Coordinator, LocalStorage, SnapshotWriter

    storage = LocalStorage(tmp_path / "ckpt")
    c = Coordinator(storage, "p")
    state, out = tmp_path / "state.bin", tmp_path / "out.parquet"
    state.write_bytes(b"s" * 300)
    out.write_bytes(b"o" * 1000)
    w = SnapshotWriter(c.storage, c.layout, 1, "t", 1)
    w.add_file("state.bin", state)
    w.stage_output("daily", [out])
    h = w.handle(metrics={"outputs_staged_bytes": w.outputs_bytes_written})
    assert (h.bytes_written, h.state_bytes_uploaded, h.outputs_staged_bytes) == (1300, 300, 1000)
    assert h.state_size == 300
