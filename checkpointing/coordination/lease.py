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

(1.11) One driver per epoch. A driver *acquires* the lease before it runs a task: it creates
the object (create-once), or, when one exists, takes it over only if it expired, by a
conditional replace of the version it read; a live lease of another holder refuses the
driver in one line naming the holder (a duplicated trigger, an overlapping cron). The lease
records the attempt its driver runs tasks as; a driver that takes an expired lease over
runs as a higher attempt than that, so everything the dead (or frozen) driver could still
start is fenced. Renewals replace the lease conditionally on the version last written: a
driver whose lease was taken over stops renewing it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Protocol

from checkpointing.config import CheckpointConfig
from checkpointing.errors import CheckpointError, EpochDrivenElsewhere, NotFound, PreconditionFailed
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.decision import Decision
from checkpointing.protocol.documents import decode, now_iso, writer_identity
from checkpointing.protocol.epoch_reader import EpochReader

log = logging.getLogger("checkpointing.coordination.lease")
FORMAT = "ckpt.lease"
#: A lease's reader needs only its length (its age is the object's last-modified time).
CODEC = Codec(FORMAT, "lease", ("ttl_seconds",), lambda d, key: float(d["ttl_seconds"]))


class LeasedEpochs(EpochReader, Protocol):
    """What a runner's lease needs of its pipeline: the epochs' documents and the lease
    length of its configuration (the coordinator is one)."""

    config: CheckpointConfig


class RunnerLease:
    """Renews the lease of ``epoch_id`` from a daemon thread while the driver runs.

    Use as a context manager around the driving of the epoch."""

    def __init__(self, coordinator: LeasedEpochs, epoch_id: int, holder: str | None = None,
                 attempt: int | None = None, wait_seconds: float = 0.0):
        self.coordinator, self.epoch_id = coordinator, epoch_id
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self.ttl = coordinator.config.lease_seconds
        #: the attempt this driver runs tasks as (recorded in the lease, 1.11); None: one
        #: above every attempt the epoch and any earlier lease know, chosen on acquiring
        self.attempt = attempt
        self.wait_seconds = wait_seconds
        self._etag: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: set once the epoch is found decided: the lease is no longer renewed
        self.decided: Decision | None = None
        #: set when another driver took the lease over: this one is fenced
        self.lost = False

    def acquire(self, wait_seconds: float = 0.0) -> int:
        """Take the lease (module docstring): create it, or take an expired one over;
        while another holder's is fresh, wait up to ``wait_seconds`` for it to end or
        expire, then refuse with :class:`EpochDrivenElsewhere`. Returns the attempt this
        driver runs tasks as."""
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                return self._acquire_once()
            except EpochDrivenElsewhere:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(1.0, self.ttl / 3))

    def _acquire_once(self) -> int:
        store, key = self.coordinator.storage, self.coordinator.layout.lease(self.epoch_id)
        prior_attempt, etag = 0, None
        try:
            data, etag = store.read(key)
        except NotFound:
            pass
        if etag is not None:
            doc = decode(data, FORMAT, store.uri(key), CODEC.required)
            holder = str(doc.get("holder") or "")
            if holder != self.holder and not _gone(holder) and \
                    not lease_expired(self.coordinator, self.epoch_id):
                raise EpochDrivenElsewhere(
                    f"epoch {self.epoch_id} is driven by {doc.get('holder', 'another process')}"
                    f" (its lease is renewed every {self.ttl / 3:g}s): not driving it twice; "
                    f"run again once it ends, or after {self.ttl:g}s without renewal to "
                    "resume it")
            prior_attempt = int(doc.get("attempt") or 0)
        floor = max(self.coordinator.next_attempt(self.epoch_id), prior_attempt + 1)
        self.attempt = max(self.attempt or 0, floor)
        body = self._body()
        try:
            self._etag = store.create(key, body) if etag is None else \
                store.replace(key, body, etag)
        except PreconditionFailed:  # another driver acquired it between our read and write
            raise EpochDrivenElsewhere(f"epoch {self.epoch_id} was just taken by another "
                                       "driver: not driving it twice") from None
        return self.attempt

    def _body(self) -> bytes:
        body = {"epoch_id": self.epoch_id, "holder": self.holder, "ttl_seconds": self.ttl,
                "renewed_at": now_iso(self.coordinator.clock()), "writer": writer_identity()}
        if self.attempt is not None:
            body["attempt"] = self.attempt
        return CODEC.encode(body)

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
        store, key = self.coordinator.storage, self.coordinator.layout.lease(self.epoch_id)
        if self._etag is None:  # never acquired (a caller that only renews): plain write
            self._etag = store.write(key, self._body())
            return True
        try:
            self._etag = store.replace(key, self._body(), self._etag)
        except (PreconditionFailed, NotFound):
            self.lost = True
            self._stop.set()
            log.warning("epoch %d: its lease was taken over by another driver; this one "
                        "(attempt %s) is fenced and stops renewing it", self.epoch_id,
                        self.attempt)
            return False
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.renew()
            except CheckpointError as exc:  # storage hiccup: the next renewal may land
                log.warning("epoch %d: lease not renewed: %s", self.epoch_id, exc)

    def __enter__(self) -> RunnerLease:
        self.acquire(self.wait_seconds)
        self._thread = threading.Thread(target=self._loop, name=f"lease-{self.epoch_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _gone(holder: str) -> bool:
    """Whether the lease's holder was a process of this host that no longer exists: a
    driver killed here is resumed at once, not a lease length later. A holder of another
    host, or one whose pid cannot be read, is judged by its lease's age only."""
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return _zombie(int(pid))


def _zombie(pid: int) -> bool:
    """A killed child not yet reaped by its parent still answers signal 0."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def lease_expired(epochs: EpochReader, epoch_id: int) -> bool:
    """True when the epoch has a lease that was not renewed within its ttl; False when it
    was, or when the epoch has no lease (not driven by a single process)."""
    key = epochs.layout.lease(epoch_id)
    try:
        info = epochs.storage.head(key)
        ttl = lease_ttl(epochs.storage.read(key)[0], epochs.storage.uri(key))
    except NotFound:
        return False
    # The store dated the object: age it by the store's clock when it answered (S3's Date
    # header), so that a host whose clock is off neither expires a live runner's lease
    # nor keeps a dead one's.
    now = info.server_time if info.server_time is not None else epochs.clock()
    return info.last_modified + ttl < now


def runner_lost(epochs: EpochReader, epoch_id: int, lease_seconds: float) -> str | None:
    """Why the epoch's single driver is known to be gone, or None: its lease was not
    renewed within its ttl, or its holder was a process of this host that no longer
    exists (killed: its epoch need not wait a lease length). None for an epoch without a
    lease (driven by Airflow's workers, whose liveness is Airflow's)."""
    store, key = epochs.storage, epochs.layout.lease(epoch_id)
    try:
        data = store.read(key)[0]
    except NotFound:
        return None
    try:
        holder = str(decode(data, FORMAT, store.uri(key), CODEC.required).get("holder") or "")
    except CheckpointError:
        holder = ""
    if holder and _gone(holder):
        return f"its runner (process {holder.rpartition(':')[2]} of this host) is gone"
    if lease_expired(epochs, epoch_id):
        return (f"its runner stopped renewing its lease for more than "
                f"{lease_seconds:g}s")
    return None


def lease_ttl(data: bytes, key: str) -> float:
    """The lease's length in seconds; MalformedDocument (naming ``key``) without one."""
    return CODEC.decode(data, key)
