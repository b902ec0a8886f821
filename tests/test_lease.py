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
from checkpointing.errors import TooManyConcurrentEpochs
from tests.helpers import DIAMOND

ROOT = Path(__file__).resolve().parent.parent
LEASE_S = 8.0


def test_lease_frees_the_lineage_only_when_the_driver_is_gone(tmp_path):
    store, go = tmp_path / "ckpt", tmp_path / "go"
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.lease_driver", str(store), "run-1", str(LEASE_S), str(go)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        line = driver.stdout.readline()
        assert line.startswith("READY"), line + driver.stderr.read()
        epoch = int(line.split()[1])
        c = Coordinator(LocalStorage(store), "p", CheckpointConfig(lease_seconds=LEASE_S))

        # Alive and slow: two leases long, it keeps renewing; the slot stays taken.
        time.sleep(2 * LEASE_S)
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


def test_epoch_without_lease_is_never_aborted_as_lost(tmp_path):
    """Airflow-driven epochs have no lease: only their timeout or the commit decides them."""
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p", CheckpointConfig(lease_seconds=0.5))
    first = c.begin_epoch(DIAMOND, "airflow-run").epoch_id
    time.sleep(1)
    with pytest.raises(TooManyConcurrentEpochs):
        c.begin_epoch(DIAMOND, "another")
    assert c.metadata(first) is None
