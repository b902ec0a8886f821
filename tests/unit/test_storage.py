"""Storage backends: the atomic primitives every protocol step relies on."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from checkpointing.errors import NotFound, PreconditionFailed, StorageError
from checkpointing.storage.s3 import S3Storage


def test_create_once_refuses_second_writer(storage):
    etag = storage.create("p/a.json", b"one")
    with pytest.raises(PreconditionFailed):
        storage.create("p/a.json", b"two")
    data, etag2 = storage.read("p/a.json")
    assert data == b"one" and etag2 == etag


def test_compare_and_swap(storage):
    e1 = storage.create("k", b"v1")
    e2 = storage.replace("k", b"v2", e1)
    assert storage.read("k")[0] == b"v2"
    with pytest.raises(PreconditionFailed):
        storage.replace("k", b"v3", e1)  # stale etag
    assert storage.read("k") == (b"v2", e2)


def test_read_missing_raises_not_found(storage):
    with pytest.raises(NotFound):
        storage.read("nope/x")
    with pytest.raises(NotFound):
        storage.head("nope/x")


def test_stamps_change_with_the_bytes_and_read_none_of_them(storage):
    """A stamp (PROTOCOL 5.16) is read without the object's bytes and changes when the
    object is rewritten, even with as many bytes. Many keys under one folder are answered
    by a listing on S3 (a request per page, not per key), scattered ones by a HEAD each;
    both give the stamp :meth:`stamp` gives, and a missing key gives None."""
    shared = [f"p/shared/{i % 7:02x}/{i:064x}" for i in range(150)]
    for i, key in enumerate(shared):
        storage.write(key, f"state-{i:04d}".encode())
    storage.write("p/shared/zz/after", b"outside the range")
    storage.write("p/tables/t/part-0.parquet", b"staged")
    keys = shared + ["p/tables/t/part-0.parquet", "p/shared/00/missing"]
    storage.stats.reset()
    stamps = storage.stamps(keys)
    requests = storage.stats.snapshot()
    assert stamps["p/shared/00/missing"] is None
    assert stamps["p/tables/t/part-0.parquet"] == storage.stamp("p/tables/t/part-0.parquet")
    assert all(stamps[k] == storage.stamp(k) for k in shared)
    assert {size for size, _ in (stamps[k] for k in shared)} == {10}
    if isinstance(storage, S3Storage):
        assert requests.get("LIST", 0) == 1 and requests.get("HEAD", 0) == 2, requests
    # A partitioned write's files, a folder each under one write's: listed too.
    parts = [f"p/epochs/1/state/t/attempt-1/spark/orders/part={m:03d}/part-0.parquet"
             for m in range(12)]
    for key in parts:
        storage.write(key, b"bucket")
    storage.stats.reset()
    listed = storage.stamps(parts)
    requests = storage.stats.snapshot()
    assert listed == {k: storage.stamp(k) for k in parts}
    if isinstance(storage, S3Storage):
        assert requests.get("LIST", 0) == 1 and "HEAD" not in requests, requests
    before = storage.stamp(shared[3])
    storage.write(shared[3], b"STATE-0003")  # same size, other bytes
    assert storage.stamp(shared[3]) != before and storage.stamps([shared[3]]) != {
        shared[3]: before}


def test_read_start_reads_only_the_first_bytes(storage):
    storage.write("big.csv", b"header\n" + b"x" * 100_000)
    storage.write("empty.csv", b"")
    assert storage.read_start("big.csv", 7) == b"header\n"
    assert storage.read_start("big.csv", 200_000) == storage.read("big.csv")[0]
    assert storage.read_start("empty.csv", 4096) == b""
    with pytest.raises(NotFound):
        storage.read_start("missing.csv", 10)


def test_list_is_sorted_and_prefix_exact(storage):
    for k in ["e/0002/b", "e/0001/a", "e/0001/c", "e/00010/x", "f/zzz"]:
        storage.write(k, k.encode())
    assert [o.key for o in storage.list("e/0001/")] == ["e/0001/a", "e/0001/c"]
    assert [o.key for o in storage.list("e/")] == ["e/0001/a", "e/0001/c", "e/00010/x",
                                                   "e/0002/b"]
    assert [o.key for o in storage.list("e/", start_after="e/0001/c")] == ["e/00010/x",
                                                                          "e/0002/b"]
    assert list(storage.list_dirs("e/")) == ["e/0001/", "e/00010/", "e/0002/"]
    assert list(storage.list_dirs("e/", start_after="e/0001/")) == ["e/00010/", "e/0002/"]


def test_delete_and_files(storage, tmp_path):
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 1000)
    info = storage.upload_file("d/f.bin", str(src))
    assert info.size == 1000
    storage.download_file("d/f.bin", str(tmp_path / "g.bin"))
    assert (tmp_path / "g.bin").read_bytes() == src.read_bytes()
    storage.delete("d/f.bin")
    storage.delete("d/f.bin")  # idempotent
    assert not storage.exists("d/f.bin")
    assert storage.key_for_uri(storage.uri("d/f.bin")) == "d/f.bin"


def test_unsafe_local_keys_refused(local_storage):
    for key in ["../escape", "a/../../b", "/abs", "a//b"]:
        with pytest.raises(StorageError):
            local_storage.write(key, b"x")


@pytest.mark.parametrize("op", ["create", "replace"])
def test_sixteen_thread_race_has_one_winner(storage, op):
    base = storage.create("race", b"base") if op == "replace" else None
    wins, losses = [], []
    barrier = threading.Barrier(16)

    def run(i: int) -> None:
        barrier.wait()
        try:
            if op == "create":
                storage.create("race", f"w{i}".encode())
            else:
                storage.replace("race", f"w{i}".encode(), base)
            wins.append(i)
        except PreconditionFailed:
            losses.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 15
    assert storage.read("race")[0] == f"w{wins[0]}".encode()


def test_unreachable_endpoint_is_named(monkeypatch):
    # Credentials of their own: whether another test's S3 server set some must not matter.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unreachable")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unreachable")
    port_nobody_listens_on = 9  # discard port: connection refused on loopback
    s = S3Storage("bucket", "p", endpoint_url=f"http://127.0.0.1:{port_nobody_listens_on}",
                  max_attempts=1, connect_timeout=1)
    with pytest.raises(StorageError, match=r"cannot reach S3 endpoint http://127.0.0.1:9"):
        s.read("x")


def _answer(server: socket.socket, reply: bytes, requests: list | None = None) -> None:
    """Answer each connection to ``server`` with ``reply`` (after reading its request, kept
    in ``requests``) until the test closes the server."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # closed by the test
        with conn:
            request = conn.recv(65536)
            if requests is not None:
                requests.append(request)
            conn.sendall(reply)


@pytest.mark.timeout(120)
def test_a_call_rides_out_an_outage_of_seconds_and_aws_max_attempts_is_honoured(monkeypatch):
    """An endpoint that refuses connections for 2 s (a MinIO restart) and then answers: the
    call succeeds within its retries (botocore backed a connection error off 50 ms x 2^i, so
    its 6 attempts used to give up within 1.6 s and fail the task); ``AWS_MAX_ATTEMPTS``,
    when set, is the number of attempts."""
    import random

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there until the outage ends
    listening, back_at = [], []

    def back_after_outage() -> None:
        time.sleep(2)
        listening.append(socket.create_server(("127.0.0.1", port)))
        back_at.append(time.monotonic())
        _answer(listening[0], b'HTTP/1.1 200 OK\r\nETag: "e1"\r\nContent-Length: 2\r\n'
                              b"Connection: close\r\n\r\nhi")

    random.seed(7)  # botocore's jitter: the same backoff every run
    # The client first: building it took most of a second on a busy host, and the outage
    # must still be on when the call starts.
    s = S3Storage("bucket", "p", endpoint_url=f"http://127.0.0.1:{port}", connect_timeout=1)
    threading.Thread(target=back_after_outage, daemon=True).start()
    started = time.monotonic()
    try:
        assert s.read("doc") == (b"hi", '"e1"')
    finally:
        for server in listening:
            server.close()
    # the call began during the outage, was refused, and was answered once it ended
    assert started < back_at[0] and s.stats.total > 1

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    once = S3Storage("bucket", "p", endpoint_url="http://127.0.0.1:9", connect_timeout=1)
    with pytest.raises(StorageError, match=r"cannot reach S3 endpoint http://127.0.0.1:9"):
        once.read("x")
    assert once.stats.total == 1


@pytest.mark.timeout(120)  # without the fix this spins forever inside botocore
def test_a_connection_cut_after_100_continue_fails_the_write_instead_of_hanging(monkeypatch):
    """A proxy that answers ``100 Continue`` and closes (toxiproxy's limit_data did) made
    botocore loop forever waiting for the interim response's blank line; every PUT now
    sends its body at once and the cut is an ordinary, retried, named failure."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    listener = socket.create_server(("127.0.0.1", 0))
    port, requests = listener.getsockname()[1], []

    threading.Thread(target=_answer, args=(listener, b"HTTP/1.1 100 Continue\r\n", requests),
                     daemon=True).start()
    s = S3Storage("bucket", "p", endpoint_url=f"http://127.0.0.1:{port}", max_attempts=2,
                  connect_timeout=2, read_timeout=2)
    try:
        with pytest.raises(StorageError, match=f"S3 endpoint http://127.0.0.1:{port} dropped the "
                           "request for s3://bucket/p/doc"):
            s.create("doc", b"{}")
    finally:
        listener.close()
    assert len(requests) > 1, requests  # retried: each try reached the proxy
    assert all(b"expect:" not in r.lower() for r in requests), requests[0][:400]


def test_requests_are_counted(storage):
    storage.stats.reset()
    storage.write("a", b"1")
    storage.read("a")
    list(storage.list(""))
    snap = storage.stats.snapshot()
    assert snap.get("PUT") == 1 and snap.get("GET") == 1 and snap.get("LIST") == 1




def test_a_write_area_lists_its_data_files_only(storage):
    """What Spark leaves beside its data files is not state: the _SUCCESS marker, hidden
    checksum files and, on an object store, the empty directory markers S3A's mkdirs
    puts (a key ending in '/', which the snapshot would refuse as a file name)."""
    from checkpointing import Coordinator

    ts = Coordinator(storage, "p").task_storage(1, "t", 1)
    _, prefix = ts.area("state", "spark/orders")
    data = [f"{prefix}part=a/x.parquet", f"{prefix}part=b/y.parquet"]
    for key in data + [f"{prefix}_SUCCESS", f"{prefix}part=a/.x.parquet.crc"]:
        storage.write(key, b"1")
    if isinstance(storage, S3Storage):
        storage.client.put_object(Bucket=storage.bucket, Key=f"{storage.prefix}{prefix}part=a/",
                                  Body=b"")
        assert f"{prefix}part=a/" in [o.key for o in storage.list(prefix)]
    assert ts.stored(prefix) == data
