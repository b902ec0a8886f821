"""The epoch leases a process holds while it runs whole DAG runs in itself.

``airflow dags test`` (and ``airflow tasks test``) run every task of a DAG run inside one
process that no scheduler watches: if it is killed, nothing else would ever end its epoch,
and every later run of the pipeline would be refused until the epoch's timeout. Such a
process therefore holds the epoch's lease, as the embedded runner does (PROTOCOL 6.1): the
next begin finds the holder dead and aborts the epoch as ``runner_lost``.

A lease lives as long as the process, across the tasks of the run (each task is a call in
this process, not a process of its own); its renewal stops by itself once the epoch is
decided, and a decided epoch's lease is dropped at the next hold."""

from __future__ import annotations

import logging
import threading

from checkpointing import Coordinator
from checkpointing.coordination.lease import RunnerLease
from checkpointing.errors import EpochDrivenElsewhere

log = logging.getLogger(__name__)


class InProcessLeases:
    """The leases this process renews for the epochs it drives alone, by (storage,
    pipeline, epoch)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, int], RunnerLease] = {}
        self._lock = threading.Lock()

    def hold(self, coord: Coordinator, storage: str, epoch_id: int) -> bool:
        """Hold ``epoch_id``'s lease from now on; True when this process holds it (already
        did, or took it), False when another live process drives the epoch."""
        key = (storage, coord.pipeline_id, epoch_id)
        with self._lock:
            for k in [k for k, lease in self._held.items() if lease.decided is not None]:
                del self._held[k]  # its renewal has stopped: nothing left to hold
            if key in self._held:
                return True
            lease = RunnerLease(coord, epoch_id)
            try:
                lease.__enter__()  # exited with the process
            except EpochDrivenElsewhere as exc:  # another live process drives it
                log.info("epoch %d: not leased by this process: %s", epoch_id, exc)
                return False
            self._held[key] = lease
            return True

    def held(self) -> list[tuple[str, str, int]]:
        """The (storage, pipeline, epoch) of the leases held now."""
        with self._lock:
            return sorted(self._held)


#: this process's holder: a process runs DAG runs in itself for its whole life or never
LEASES = InProcessLeases()
