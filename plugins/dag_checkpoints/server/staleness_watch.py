"""Silence pages: a watcher in the scheduler that looks at every checkpointed DAG whether
or not it runs.

The coordinator decides staleness only when something happens (a begin, an abort), so a
pipeline with no runs at all (its DAG paused, the upstream that triggers it silent, its
runs stuck in the queue) would never alert and its ``last_completed_age`` would stand
still. Flink's ``lastCheckpointAge`` keeps growing without checkpoints; here each scheduler
runs a :class:`StalenessWatch` (the plugin registers one as a listener) and, every
``[dag_checkpoints] staleness_check_seconds`` (60 by default; 0 turns it off),
for each DAG whose serialized begin step carries checkpoint settings:

- emits ``dag_checkpoints.last_completed_age`` (seconds since its main lineage's last
  completed epoch);
- delivers the staleness alert when that age exceeds ``max_epoch_age_seconds`` (once per
  stale period: the record is create-once, PROTOCOL 5.18, so several schedulers, or a
  begin step noticing too, alert once);
- delivers one "resolved" notice when an epoch completed after such an alert.

Correctness does not depend on it: it only reads and writes the alert records.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from airflow.listeners import hookimpl

from ..hooks.checkpoint import CheckpointHook
from ..shared.settings import CheckpointSettings

log = logging.getLogger(__name__)
DEFAULT_PERIOD = 60.0
#: the job type of Airflow's scheduler (``SchedulerJobRunner.job_type``)
SCHEDULER = "SchedulerJob"


def period_seconds() -> float:
    from airflow.configuration import conf

    return conf.getfloat("dag_checkpoints", "staleness_check_seconds",
                         fallback=DEFAULT_PERIOD)


class StalenessWatch:
    """The watcher, registered with the plugin as a listener object (Airflow accepts
    modules or instances): Airflow calls ``on_starting`` as each of its jobs starts and
    ``before_stopping`` as it ends. A job's type is set by its runner after
    ``on_starting``, so the thread starts for any job and, at its first look, goes on in a
    scheduler only (the triggerer's and the DAG processor's end there); a task's start
    (Airflow's task-runner marker, not a job) starts nothing. ``before_stopping`` of the
    job it watches for stops it."""

    def __init__(self, period: float | None = None) -> None:
        self._period = period
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._component: Any = None

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    @hookimpl
    def on_starting(self, component: Any) -> None:
        if hasattr(component, "job_type"):  # a Job (scheduler, triggerer, DAG processor)
            self.start(component)

    @hookimpl
    def before_stopping(self, component: Any) -> None:
        if component is self._component:
            self.stop()

    def start(self, component: Any = None) -> threading.Thread | None:
        """The watcher thread, started once; None when turned off. ``component`` is the
        job whose type decides whether it goes on (None: watch whatever this is)."""
        period = period_seconds() if self._period is None else self._period
        if period <= 0 or (self._thread is not None and self._thread.is_alive()):
            return self._thread
        self._stop.clear()
        self._component = component
        self._thread = threading.Thread(target=self._loop, args=(period, component),
                                        name="ckpt-staleness-watch", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the watcher (the look under way finishes first, up to ``timeout``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self, period: float, component: Any) -> None:
        first = True
        while not self._stop.wait(period):
            if first:
                first = False
                kind = getattr(component, "job_type", SCHEDULER)
                if kind != SCHEDULER:
                    return  # not a scheduler: nothing to watch here
                log.info("checkpoint staleness watcher started: every %.0f s", period)
            try:
                watch_once(checkpointed_dags())
            except Exception as exc:  # noqa: BLE001 - the scheduler's thread must survive
                log.warning("checkpoint staleness watcher: %s", type(exc).__name__)


def checkpointed_dags() -> dict[str, CheckpointSettings]:
    """Every serialized DAG whose begin step carries checkpoint settings, paused or not."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from .deployed import deployed_settings

    with create_session() as session:
        dag_ids = list(session.scalars(select(SerializedDagModel.dag_id).distinct()))
    out = {}
    for dag_id in dag_ids:
        settings = deployed_settings(dag_id)
        if settings is not None and settings.storage.strip():
            out[dag_id] = settings
    return out


def watch_once(dags: dict[str, CheckpointSettings]) -> dict[str, float | None]:
    """One look at each DAG: its main lineage's last-completed age (emitted), its
    staleness alert and the end of its stale periods (delivered once). Returns the ages;
    a DAG whose storage cannot be read is logged in one line and skipped."""
    from ..notifications import announce_resolved, announce_stale
    from ..shared.metrics import emit_last_completed_age

    ages: dict[str, float | None] = {}
    for dag_id, settings in sorted(dags.items()):
        try:
            coord = CheckpointHook(settings).get_coordinator()
            age = coord.records.last_completed_age()
        except Exception as exc:  # noqa: BLE001 - one DAG's storage must not stop the rest
            log.warning("checkpoint staleness of DAG %s not checked: %s", dag_id,
                        type(exc).__name__)
            continue
        ages[dag_id] = age
        if age is None:  # nothing completed yet: the timeouts and declines alert instead
            continue
        emit_last_completed_age(settings.pipeline_id, settings.dag_id or dag_id, age)
        announce_stale(coord, settings.alerts)
        announce_resolved(coord, settings.alerts)
    return ages
