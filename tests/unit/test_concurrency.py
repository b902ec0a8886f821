"""Many threads and processes racing begin / ack / complete / abort, on local storage and
on the real S3 server. The storage is never mocked."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter

from bench.harness.race import race
from checkpointing import CheckpointConfig, Coordinator, StateHandle, open_storage
from checkpointing.protocol.barrier import TaskPlan
from tests.support.helpers import DIAMOND

N = 16
UNLIMITED = CheckpointConfig(max_concurrent_epochs=1000)


def test_concurrent_begins_get_distinct_ids(storage):
    results, errors = race(lambda i: Coordinator(storage, "p", UNLIMITED)
                            .begin_epoch(DIAMOND, f"run{i}").epoch_id)
    assert not errors
    assert sorted(results) == list(range(1, N + 1))
    reg = Coordinator(storage, "p").registry()
    assert reg.last_epoch_id == N and len(reg.open) == N


def test_concurrent_completes_one_winner_all_agree(storage):
    c = Coordinator(storage, "p")
    b = c.begin_epoch({"t": TaskPlan(publishes=True)}, "r")
    c.register_attempt(b.epoch_id, "t", 1)
    c.acknowledge(b.epoch_id, "t", 1, StateHandle("t", b.epoch_id, 1))
    results, errors = race(lambda i: Coordinator(storage, "p").complete(b.epoch_id))
    assert not errors
    assert len({r.writer["nonce"] for r in results}) == 1  # everyone observes one winner
    assert Coordinator(storage, "p").registry().lineage("main").latest_completed == 1


def test_complete_and_abort_race_has_one_outcome_and_one_alert(storage):
    c = Coordinator(storage, "p")
    b = c.begin_epoch({"t": TaskPlan()}, "r")
    c.register_attempt(b.epoch_id, "t", 1)
    c.acknowledge(b.epoch_id, "t", 1, StateHandle("t", b.epoch_id, 1))
    alerts = []

    def act(i):
        co = Coordinator(storage, "p", on_abort=lambda m, _b: alerts.append(m))
        return co.complete(b.epoch_id) if i % 2 else co.abort(b.epoch_id, "cancelled", "race")

    results, errors = race(act)
    assert not errors
    statuses = {r.status for r in results}
    assert len(statuses) == 1
    assert len(alerts) == (1 if statuses == {"aborted"} else 0)


def test_concurrent_aborts_alert_once(storage):
    c = Coordinator(storage, "p")
    b = c.begin_epoch(DIAMOND, "r")
    alerts = []
    results, errors = race(lambda i: Coordinator(
        storage, "p", on_abort=lambda m, _b: alerts.append(i)).abort(b.epoch_id, "timeout"))
    assert not errors and len(alerts) == 1
    assert Coordinator(storage, "p").registry().lineage("main").consecutive_failed == 1


def test_concurrent_attempts_one_effective_ack(storage):
    c = Coordinator(storage, "p")
    b = c.begin_epoch({"t": TaskPlan()}, "r")

    def attempt(i):
        co = Coordinator(storage, "p")
        a = i + 1
        co.register_attempt(b.epoch_id, "t", a)
        return co.acknowledge(b.epoch_id, "t", a,
                              StateHandle("t", b.epoch_id, a)).acknowledgement.attempt

    results, errors = race(attempt)
    meta = c.complete(b.epoch_id)
    # Whatever interleaving happened, the effective ack is from the highest attempt, and
    # every attempt that was told "acknowledged" is that attempt or was later fenced.
    assert meta.acks["t"].attempt == N
    assert all(type(e).__name__ in ("StaleAttempt",) for e in errors)
    # An attempt told "acknowledged" got its own attempt back, and every attempt either
    # was acknowledged or refused as stale (none vanished); the highest was acknowledged.
    acked = [r for r in results if r is not None]
    assert all(r == i + 1 for i, r in enumerate(results) if r is not None)
    assert len(acked) + len(errors) == N and N in acked


# ---------------------------------------------------------------- processes
def _proc_cycle(uri: str, endpoint: str | None, creds: dict, rounds: int, q) -> None:
    import os

    os.environ.update(creds)
    storage = open_storage(uri, endpoint_url=endpoint)
    c = Coordinator(storage, "p", UNLIMITED)
    out = []
    for r in range(rounds):
        b = c.begin_epoch({"t": TaskPlan(publishes=True)}, f"pid{os.getpid()}-{r}")
        c.register_attempt(b.epoch_id, "t", 1)
        c.acknowledge(b.epoch_id, "t", 1, StateHandle("t", b.epoch_id, 1))
        m = c.complete(b.epoch_id)
        out.append((b.epoch_id, m.writer["nonce"]))
    q.put(out)


def test_processes_race_full_cycles(backend, tmp_path, request):
    if backend == "local":
        uri, endpoint, creds = f"file://{tmp_path}/ckpt", None, {}
    else:
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        uri, endpoint = f"s3://{bucket}/root", server.endpoint
        from bench.harness.s3server import ACCESS_KEY, SECRET_KEY
        creds = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_proc_cycle, args=(uri, endpoint, creds, 5, q)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [q.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ids = [e for r in results for e, _ in r]
    assert sorted(ids) == list(range(1, 21))  # distinct, no gaps, never reused
    storage = open_storage(uri, endpoint_url=endpoint)
    c = Coordinator(storage, "p")
    assert c.latest_completed() == 20
    assert Counter(c.status(i) for i in ids) == {"completed": 20}
    from checkpointing import read_manifest
    assert read_manifest(storage, c.layout).epoch_id == 20
