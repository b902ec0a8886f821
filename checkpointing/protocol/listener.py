"""What the coordinator tells the world as epochs happen (Flink's ``CheckpointStatsTracker``
callbacks): a collaborator the coordinator is given, so that metrics (the Airflow provider
emits them through Airflow's own StatsD/OpenTelemetry facility) never live in the core.

Every callback is made by the process whose write it reports (the acknowledging task, the
process whose decision won), once per event. A listener must never fail or slow the
protocol: :class:`SafeListener` wraps one, drops its exceptions and logs the first of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from checkpointing.protocol.acknowledgement import Acknowledgement
from checkpointing.protocol.barrier import Barrier
from checkpointing.protocol.epoch_metadata import EpochMetadata
from checkpointing.protocol.state_handle import StateHandle

log = logging.getLogger("checkpointing.protocol.listener")


@dataclass(frozen=True)
class TableCommitted:
    """One table output committed (or found committed) when its epoch published."""

    output: str
    version: int
    committed: bool
    seconds: float


class EpochListener:
    """The callbacks, all no-ops: subclass and override what you report."""

    #: whether anything listens: the coordinator reads what only a report needs (the
    #: acknowledgements of a decided epoch, the lineage's last completion) only then
    reports = True

    def epoch_began(self, barrier: Barrier) -> None:
        """An epoch's barrier was written (its ``restore_fallback`` lists the completed
        epochs skipped as parent because their files failed verification)."""

    def task_acknowledged(self, barrier: Barrier, ack: Acknowledgement) -> None:
        """A task's acknowledgement was stored (not a duplicate): ``ack.state_handle``
        holds its timings, sizes and where it restored from."""

    def ack_refused(self, epoch_id: int, task_id: str, why: str) -> None:
        """A late or stale acknowledgement was refused (the epoch decided, a newer
        attempt exists)."""

    def epoch_decided(self, meta: EpochMetadata, barrier: Barrier | None,
                      handles: dict[str, StateHandle],
                      last_completed_at: str | None) -> None:
        """This process decided the epoch (completed or aborted). ``handles``: the
        acknowledged tasks' state handles; ``last_completed_at``: when the lineage's
        previous completed epoch was decided (None: never), for its age."""

    def tables_committed(self, meta: EpochMetadata, barrier: Barrier | None,
                         tables: list[TableCommitted]) -> None:
        """The completed epoch's table outputs were committed (phase two)."""


class NoOpListener(EpochListener):
    """The listener of a coordinator given none (Flink's ``NoOpCheckpointStatsTracker``)."""

    reports = False


class SafeListener(EpochListener):
    """Calls ``inner``; an exception is dropped and logged once, never raised."""

    def __init__(self, inner: EpochListener):
        self.inner = inner
        self.reports = inner.reports
        self._warned = False

    def _call(self, name: str, *args: object) -> None:
        try:
            getattr(self.inner, name)(*args)
        except Exception as exc:  # noqa: BLE001 - reporting must never fail the protocol
            if not self._warned:
                self._warned = True
                log.warning("epoch listener %s failed (%s: %s); further failures are not "
                            "logged", type(self.inner).__name__, type(exc).__name__,
                            str(exc).splitlines()[0][:200] if str(exc) else "")

    def epoch_began(self, barrier: Barrier) -> None:
        self._call("epoch_began", barrier)

    def task_acknowledged(self, barrier: Barrier, ack: Acknowledgement) -> None:
        self._call("task_acknowledged", barrier, ack)

    def ack_refused(self, epoch_id: int, task_id: str, why: str) -> None:
        self._call("ack_refused", epoch_id, task_id, why)

    def epoch_decided(self, meta: EpochMetadata, barrier: Barrier | None,
                      handles: dict[str, StateHandle],
                      last_completed_at: str | None) -> None:
        self._call("epoch_decided", meta, barrier, handles, last_completed_at)

    def tables_committed(self, meta: EpochMetadata, barrier: Barrier | None,
                         tables: list[TableCommitted]) -> None:
        self._call("tables_committed", meta, barrier, tables)
