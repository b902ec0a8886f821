"""The liveness lease (PROTOCOL 5.13, 6.1): a pending epoch whose driving process is gone
stops blocking its lineage within the lease, one whose driver is alive (even frozen for less
than the lease, or slow) is never aborted, and a driver that wakes after losing its epoch
has its acknowledgement refused. The driver is a real process, frozen with SIGSTOP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpointing import CheckpointConfig, Coordinator, LocalStorage
from checkpointing.coordination.lease import RunnerLease, lease_expired
from checkpointing.errors import TooManyConcurrentEpochs
from tests.support.helpers import DIAMOND, FakeClock

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 8.0


def test_lease_frees_the_lineage_only_when_the_driver_is_gone(tmp_path):
    store, go = tmp_path / "ckpt", tmp_path / "go"
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.support.lease_driver", str(store), "run-1", str(LEASE_S),
         str(go)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        line = driver.stdout.readline()
        assert line.startswith("READY"), line + driver.stderr.read()
        epoch = int(line.split()[1])
        c = Coordinator(LocalStorage(store), "p", CheckpointConfig(lease_seconds=LEASE_S))

        # Alive and slow: past one lease, its thread keeps renewing; the slot stays taken.
        # (The rule itself, at every boundary, is checked without sleeping below.)
        time.sleep(1.5 * LEASE_S)
        with pytest.raises(TooManyConcurrentEpochs):
            c.begin_epoch(DIAMOND, "run-2")
        # Frozen for less than the lease: still not aborted.
        driver.send_signal(signal.SIGSTOP)
        time.sleep(LEASE_S / 4)
        with pytest.raises(TooManyConcurrentEpochs):
            c.begin_epoch(DIAMOND, "run-2")
        assert c.metadata(epoch) is None
        # Frozen past the lease: the next begin aborts it as runner_lost and proceeds.
        time.sleep(LEASE_S + 1)
        nxt = c.begin_epoch(DIAMOND, "run-2")
        meta = c.metadata(epoch)
        assert nxt.epoch_id == epoch + 1
        assert (meta.status, meta.reason) == ("aborted", "runner_lost")
        assert "src_b" in meta.missing_tasks
        # The driver wakes up: its acknowledgement is refused (the epoch is decided).
        driver.send_signal(signal.SIGCONT)
        go.write_text("go")
        out, err = driver.communicate(timeout=60)
        assert out.startswith(f"REFUSED epoch {epoch} was aborted (runner_lost"), \
            out + err
        assert c.metadata(epoch).reason == "runner_lost"
    finally:
        if driver.poll() is None:
            driver.send_signal(signal.SIGCONT)
            driver.kill()


class StoreClock:
    """The clock the lease is aged by (the store's; LocalStorage dates a lease by its file's
    modification time): a fake clock that also dates every lease renewed under it."""

    def __init__(self, storage: LocalStorage):
        self.storage, self.clock = storage, FakeClock()

    def renew(self, lease: RunnerLease) -> bool:
        renewed = lease.renew()
        if renewed:
            path = self.storage.root / lease.coordinator.layout.lease(lease.epoch_id)
            os.utime(path, (self.clock.t, self.clock.t))
        return renewed


def test_lease_rule_by_an_injected_clock(tmp_path):
    """The lease boundaries without sleeping: a lease renewed within its ttl holds the slot
    however long the epoch runs; one not renewed for more than its ttl is aborted as
    ``runner_lost`` by the next begin, and renewing stops once the epoch is decided."""
    storage = LocalStorage(tmp_path / "ckpt")
    store = StoreClock(storage)
    c = Coordinator(storage, "p", CheckpointConfig(lease_seconds=LEASE_S), clock=store.clock)
    epoch = c.begin_epoch(DIAMOND, "run-1").epoch_id
    lease = RunnerLease(c, epoch)
    assert store.renew(lease)
    for _ in range(10):  # ten leases long, renewed every third of one
        store.clock.advance(LEASE_S / 3)
        assert not lease_expired(c, epoch)
        assert store.renew(lease)
    with pytest.raises(TooManyConcurrentEpochs):
        c.begin_epoch(DIAMOND, "run-2")
    store.clock.advance(LEASE_S)  # exactly one ttl since the last renewal: still held
    assert not lease_expired(c, epoch)
    with pytest.raises(TooManyConcurrentEpochs):
        c.begin_epoch(DIAMOND, "run-2")
    store.clock.advance(0.01)
    assert lease_expired(c, epoch)
    assert c.begin_epoch(DIAMOND, "run-2").epoch_id == epoch + 1
    assert (c.metadata(epoch).status, c.metadata(epoch).reason) == ("aborted", "runner_lost")
    assert not store.renew(lease)  # decided: the lease is not written again
    assert lease.decided is not None and lease.decided.status == "aborted"


def test_epoch_without_lease_is_never_aborted_as_lost(tmp_path):
    """Airflow-driven epochs have no lease: only their timeout or the commit decides them."""
    clock = FakeClock()
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p", CheckpointConfig(lease_seconds=0.5),
                    clock=clock)
    first = c.begin_epoch(DIAMOND, "airflow-run").epoch_id
    clock.advance(60)  # 120 leases, well within the timeout
    assert not lease_expired(c, first)
    with pytest.raises(TooManyConcurrentEpochs):
        c.begin_epoch(DIAMOND, "another")
    assert c.metadata(first) is None
