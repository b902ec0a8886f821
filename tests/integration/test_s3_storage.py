"""What only S3 has, on a real S3-compatible server (MinIO): create-once's own-retry
recognition, named bucket and credential errors, URIs, the store's checksums, and a lease
aged by the server's clock. Every other storage behaviour runs on both backends (the unit
tier on files, tests/integration/test_*_on_s3.py on MinIO)."""

from __future__ import annotations

import pytest

from checkpointing import CheckpointConfig, Coordinator
from checkpointing.coordination.lease import RunnerLease, lease_expired
from checkpointing.errors import PreconditionFailed, StorageError
from checkpointing.storage import open_storage
from checkpointing.storage.s3 import S3Storage
from tests.support.helpers import DIAMOND, FakeClock


def test_lease_is_aged_by_the_stores_clock(s3_storage):
    """A host whose clock runs an hour ahead (or behind) neither expires a live lease nor
    keeps a stale one: the age is the S3 server's Date minus the object's Last-Modified."""
    clock = FakeClock()
    import time

    c = Coordinator(s3_storage, "p", CheckpointConfig(lease_seconds=5), clock=time.time)
    b = c.begin_epoch(DIAMOND, "r")
    RunnerLease(c, b.epoch_id).renew()
    for skew in (3600, -3600):
        clock.t = time.time() + skew
        skewed = Coordinator(s3_storage, "p", CheckpointConfig(lease_seconds=5), clock=clock)
        assert not lease_expired(skewed, b.epoch_id), skew
    time.sleep(7)
    clock.t = time.time() - 3600  # an hour behind: the lease is still seen as stale
    skewed = Coordinator(s3_storage, "p", CheckpointConfig(lease_seconds=5), clock=clock)
    assert lease_expired(skewed, b.epoch_id)


def test_create_once_same_bytes_is_recognised_as_own_write(s3_storage):
    # A retried request whose first try landed sees 412; identical bytes mean "ours".
    etag = s3_storage.create("p/a.json", b"same")
    assert s3_storage.create("p/a.json", b"same") == etag
    with pytest.raises(PreconditionFailed):
        s3_storage.create("p/a.json", b"different")


def test_missing_bucket_is_named(s3_server):
    s = S3Storage("no-such-bucket-here", "p", endpoint_url=s3_server.endpoint)
    with pytest.raises(StorageError, match="bucket 'no-such-bucket-here' does not exist"):
        s.write("x", b"1")


def test_bad_credentials_are_named(s3_server, s3_bucket, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    s = S3Storage(s3_bucket, "p", endpoint_url=s3_server.endpoint)
    with pytest.raises(StorageError, match="access denied") as info:
        s.write("x", b"1")
    assert "wrong-secret" not in str(info.value)


def test_open_storage_uris(tmp_path, s3_server, s3_bucket):
    assert open_storage(f"file://{tmp_path}/a").uri("k").endswith("/a/k")
    assert open_storage(str(tmp_path / "b")).uri("k").endswith("/b/k")
    s3 = open_storage(f"s3://{s3_bucket}/pre/fix", endpoint_url=s3_server.endpoint)
    assert s3.uri("k") == f"s3://{s3_bucket}/pre/fix/k"
    with pytest.raises(StorageError, match="unsupported storage URI"):
        open_storage("ftp://x/y")


def test_stored_sha256_is_the_stores_checksum_or_none(s3_server, s3_bucket, tmp_path):
    """An object uploaded with a SHA-256 checksum (as s3a writes with
    fs.s3a.create.checksum.algorithm=SHA256) gives its sha256 by one HEAD; others give
    None, and the snapshot then hashes the file itself; both record the true sha256."""
    import hashlib

    from checkpointing import SnapshotWriter
    from checkpointing.protocol.layout import Layout
    from checkpointing.storage.s3 import S3Storage

    st = S3Storage(s3_bucket, "root", endpoint_url=s3_server.endpoint)
    client = s3_server.client()
    data = bytes(range(256)) * 40
    client.put_object(Bucket=s3_bucket, Key="root/with", Body=data, ChecksumAlgorithm="SHA256")
    client.put_object(Bucket=s3_bucket, Key="root/crc", Body=data, ChecksumAlgorithm="CRC32")
    want = hashlib.sha256(data).hexdigest()
    assert st.stored_sha256("with") == (want, len(data))
    assert st.stored_sha256("crc") is None
    w = SnapshotWriter(st, Layout("p"), 1, "t", 1)
    assert [w.add_stored(n, n).sha256 for n in ("with", "crc")] == [want, want]
    assert w.hashed_by_store == 1


def test_a_response_cut_inside_a_header_is_a_storage_error(monkeypatch):
    """A connection cut inside a header's value (toxiproxy's limit_data did it to MinIO)
    leaves http.client a header block it takes as complete, and botocore fails to parse
    the value: a one-line StorageError naming the object, as for every other cut response,
    which a retry handles; never botocore's ValueError."""
    import socket
    import threading

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "cut-test")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    cut = b'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nETag: "abc"\r\nLast-Modified: '

    def answer_cut() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(cut)

    threading.Thread(target=answer_cut, daemon=True).start()
    try:
        storage = S3Storage("bucket", "p/", endpoint_url=f"http://127.0.0.1:{port}",
                            max_attempts=1)
        for call in (storage.head, storage.read):
            with pytest.raises(StorageError, match=r"^S3 failure at s3://bucket/p/x\.json: "
                                                   r"incomplete response"):
                call("x.json")
    finally:
        server.close()
