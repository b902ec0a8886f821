"""Silence pages: a watcher in the scheduler that looks at every checkpointed DAG whether
or not it runs.

The coordinator decides staleness only when something happens (a begin, an abort), so a
pipeline with no runs at all (its DAG paused, the upstream that triggers it silent, its
runs stuck in the queue) would never alert and its ``last_completed_age`` would stand
still. Flink's ``lastCheckpointAge`` keeps growing without checkpoints; here each scheduler
starts this watcher (Airflow calls the plugin's listener ``on_starting`` as its jobs start)
and, every ``[dag_checkpoints] staleness_check_seconds`` (60 by default; 0 turns it off),
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
import sys
import threading
from typing import Any

from airflow.listeners import hookimpl

from ..hooks.checkpoint import CheckpointHook
from ..shared.settings import CheckpointSettings

log = logging.getLogger(__name__)
DEFAULT_PERIOD = 60.0
_started: threading.Thread | None = None


def period_seconds() -> float:
    from airflow.configuration import conf

    return conf.getfloat("dag_checkpoints", "staleness_check_seconds",
                         fallback=DEFAULT_PERIOD)


@hookimpl
def on_starting(component: Any) -> None:
    """Start the watcher in a scheduler (Airflow calls this as each of its jobs starts;
    the scheduler's command is what tells which component this process is)."""
    if sys.argv[1:2] == ["scheduler"]:
        start()


def start(period: float | None = None) -> threading.Thread | None:
    """The watcher thread, started once per process; None when turned off."""
    global _started
    period = period_seconds() if period is None else period
    if period <= 0 or (_started is not None and _started.is_alive()):
        return _started
    stop = threading.Event()
    _started = threading.Thread(target=_loop, args=(period, stop),
                                name="ckpt-staleness-watch", daemon=True)
    _started.start()
    log.info("checkpoint staleness watcher started: every %.0f s", period)
    return _started


def _loop(period: float, stop: threading.Event) -> None:
    while not stop.wait(period):
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
