"""The leases a `dags test` process holds for its epochs: held once, refused while another
live driver holds one, dropped once the epoch is decided."""

from __future__ import annotations

from checkpointing import CheckpointConfig, Coordinator, LocalStorage
from checkpointing.coordination.lease import RunnerLease, lease_expired
from tests.support.helpers import DIAMOND


def test_an_epoch_s_lease_is_held_once_and_dropped_when_decided(tmp_path):
    from dag_checkpoints.task.in_process_leases import InProcessLeases

    c = Coordinator(LocalStorage(tmp_path), "p", config=CheckpointConfig(lease_seconds=30))
    first = c.begin_epoch(DIAMOND, "r1").epoch_id
    leases = InProcessLeases()
    assert leases.hold(c, "file:///ckpt", first) and leases.hold(c, "file:///ckpt", first)
    assert leases.held() == [("file:///ckpt", "p", first)]
    assert not lease_expired(c, first)  # renewed by this process: the next begin waits
    c.abort(first, "cancelled", "run marked failed")
    # The renewal notices the decision and stops; the next hold drops the lease.
    lease = leases._held[("file:///ckpt", "p", first)]
    assert lease.renew() is False and lease.decided is not None
    second = c.begin_epoch(DIAMOND, "r2").epoch_id
    assert leases.hold(c, "file:///ckpt", second)
    assert leases.held() == [("file:///ckpt", "p", second)]


def test_an_epoch_another_live_process_drives_is_not_held(tmp_path):
    from dag_checkpoints.task.in_process_leases import InProcessLeases

    c = Coordinator(LocalStorage(tmp_path), "p", config=CheckpointConfig(lease_seconds=30))
    epoch = c.begin_epoch(DIAMOND, "r").epoch_id
    other = RunnerLease(c, epoch, holder="elsewhere:1")  # a live driver of another host
    other.acquire()
    leases = InProcessLeases()
    assert leases.hold(c, "file:///ckpt", epoch) is False and leases.held() == []
