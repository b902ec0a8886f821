"""Liveness lease of an epoch driven by one process (PROTOCOL 5.13, 6.1).

An epoch run by the embedded runner or the CLI has one driver process; if it dies (kill -9,
a lost host), its epoch stays pending and blocks its lineage (``max_concurrent_epochs``)
until its timeout, an hour by default. While it runs, the driver renews a lease object,
``epochs/<id>/lease.json``, every third of ``lease_seconds``. A begin that finds its lineage
full aborts each pending epoch whose lease has not been renewed for ``lease_seconds`` (as
storage's clock dates the object), with reason ``runner_lost``; an epoch whose driver is
alive but slow keeps renewing and is never aborted this way. Epochs driven by Airflow have
no lease: Airflow detects its own dead workers, and their watchdog enforces the timeout.

Fencing does the rest: a frozen driver that wakes up after its epoch was aborted has its
acknowledgement refused (the epoch is decided). The renewal itself stops once the epoch is
decided, and writes nothing then: a lease renewed after the abort would recreate
``lease.json`` in an epoch that retention deleted.

A lease's age is measured by the clock that dated it: storage's (the ``Date`` of the same
answer that carries its last-modified time), never this host's against the server's.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from .codec import Codec
from .documents import now_iso, writer_identity
from .errors import CheckpointError, NotFound

log = logging.getLogger("checkpointing.lease")
FORMAT = "ckpt.lease"
#: A lease's reader needs only its length (its age is the object's last-modified time).
CODEC = Codec(FORMAT, "lease", ("ttl_seconds",), lambda d, key: float(d["ttl_seconds"]))


class RunnerLease:
    """Renews the lease of ``epoch_id`` from a daemon thread while the driver runs.

    Use as a context manager around the driving of the epoch."""

    def __init__(self, coordinator: Any, epoch_id: int, holder: str | None = None):
        self.coordinator, self.epoch_id = coordinator, epoch_id
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self.ttl = coordinator.config.lease_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: set once the epoch is found decided: the lease is no longer renewed
        self.decided: Any = None

    def renew(self) -> bool:
        """Renew the lease unless the epoch is decided (then write nothing, stop renewing
        and keep the decision in ``decided``); True when renewed."""
        decision = self.coordinator.decision(self.epoch_id)
        if decision is not None:
            self.decided = decision
            self._stop.set()
            log.info("epoch %d: %s; its lease is no longer renewed", self.epoch_id,
                     decision.describe())
            return False
        body = {"epoch_id": self.epoch_id, "holder": self.holder, "ttl_seconds": self.ttl,
                "renewed_at": now_iso(self.coordinator.clock()), "writer": writer_identity()}
        self.coordinator.storage.write(self.coordinator.layout.lease(self.epoch_id),
                                       CODEC.encode(body))
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.renew()
            except CheckpointError as exc:  # storage hiccup: the next renewal may land
                log.warning("epoch %d: lease not renewed: %s", self.epoch_id, exc)

    def __enter__(self) -> RunnerLease:
        self.renew()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{self.epoch_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def lease_expired(coordinator: Any, epoch_id: int) -> bool:
    """True when the epoch has a lease that was not renewed within its ttl; False when it
    was, or when the epoch has no lease (not driven by a single process)."""
    key = coordinator.layout.lease(epoch_id)
    try:
        info = coordinator.storage.head(key)
        ttl = lease_ttl(coordinator.storage.read(key)[0], coordinator.storage.uri(key))
    except NotFound:
        return False
    # The store dated the object: age it by the store's clock when it answered (S3's Date
    # header), so that a host whose clock is off neither expires a live runner's lease
    # nor keeps a dead one's.
    now = info.server_time if info.server_time is not None else coordinator.clock()
    return info.last_modified + ttl < now


def lease_ttl(data: bytes, key: str) -> float:
    """The lease's length in seconds; MalformedDocument (naming ``key``) without one."""
    return CODEC.decode(data, key)
