"""Flink's checkpoint statistics as Airflow metrics: the coordinator's events
(:class:`checkpointing.protocol.listener.EpochListener`) emitted through Airflow's own metrics
facility (``airflow.sdk.observability.stats``), so that StatsD, DogStatsD and OpenTelemetry
all work as Airflow's ``[metrics]`` configuration selects, with no setting of ours; with
metrics off (Airflow's default) nothing is sent.

Every name starts with ``dag_checkpoints.`` (after Airflow's own ``statsd_prefix``); tags
carry the pipeline, the DAG, the task and the abort reason, never a path or a secret. The
reference is docs/METRICS.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from checkpointing.protocol.documents import parse_iso
from checkpointing.protocol.listener import EpochListener

PREFIX = "dag_checkpoints"
#: per task, the handle's timing -> its metric
TASK_TIMERS = {"restore_ms": "task.restore", "run_ms": "task.run",
               "sync_ms": "task.snapshot_sync", "async_ms": "task.snapshot_async"}


def _stats() -> Any:
    from airflow.sdk.observability import stats

    initialize_outside_tasks()  # a scheduler's thread, a triggerer's runner
    return stats


def initialize_outside_tasks() -> None:
    """Airflow sets up the Task SDK's metrics (what :func:`_stats` emits through) in task
    processes only; a scheduler's thread sets them up the same way, from ``[metrics]``,
    or its figures would go nowhere."""
    from airflow.sdk._shared.observability.metrics import stats as sdk_stats

    if getattr(sdk_stats, "_factory", None) is None:
        from airflow.configuration import conf
        from airflow.sdk.observability.metrics import stats_utils

        sdk_stats.initialize(factory=stats_utils.get_stats_factory(),
                             export_legacy_names=conf.getboolean("metrics", "legacy_names_on"))


def emit_last_completed_age(pipeline_id: str, dag_id: str | None, age: float) -> None:
    """The seconds since the pipeline's last completed epoch, emitted periodically by the
    staleness watcher (:mod:`..staleness_watch`), runs or no runs."""
    _stats().gauge(f"{PREFIX}.last_completed_age", age,
                   tags=AirflowMetrics(pipeline_id, dag_id).tags)


class AirflowMetrics(EpochListener):
    """Emits the epoch statistics of pipeline ``pipeline_id`` (owned by DAG ``dag_id``)."""

    def __init__(self, pipeline_id: str, dag_id: str | None = None):
        self.tags = {"pipeline": pipeline_id, **({"dag_id": dag_id} if dag_id else {})}

    def _tags(self, **more: Any) -> dict[str, str]:
        return {**self.tags, **{k: str(v) for k, v in more.items() if v is not None}}

    def epoch_began(self, barrier: Any) -> None:
        if barrier.restore_fallback:
            _stats().incr(f"{PREFIX}.restore.fallbacks", count=len(barrier.restore_fallback),
                          tags=self._tags())

    def task_acknowledged(self, barrier: Any, ack: Any) -> None:
        stats, h = _stats(), ack.state_handle
        tags = self._tags(task=ack.task_id)
        for key, name in TASK_TIMERS.items():
            if h.timings.get(key) is not None:
                stats.timing(f"{PREFIX}.{name}", timedelta(milliseconds=float(h.timings[key])),
                             tags=tags)
        created = parse_iso(barrier.created_at)
        if h.timings.get("started_at"):
            # Flink's start delay: from the barrier to the task's start (its upstream
            # tasks' work and the scheduler's delay)
            stats.timing(f"{PREFIX}.task.start_delay", timedelta(seconds=max(
                0.0, parse_iso(h.timings["started_at"]) - created)), tags=tags)
        stats.timing(f"{PREFIX}.task.ack_delay", timedelta(seconds=max(
            0.0, parse_iso(ack.acked_at) - created)), tags=tags)
        stats.gauge(f"{PREFIX}.task.state_size", h.state_size, tags=tags)
        # Flink's incremental size is state only: outputs staged for publication apart
        stats.gauge(f"{PREFIX}.task.incremental_size", h.state_bytes_uploaded, tags=tags)
        stats.gauge(f"{PREFIX}.task.outputs_staged_size", h.outputs_staged_bytes, tags=tags)
        if (h.restored_from or {}).get("epoch_id") is not None:
            stats.incr(f"{PREFIX}.task.restored", tags=tags)

    def ack_refused(self, epoch_id: int, task_id: str, why: str) -> None:
        _stats().incr(f"{PREFIX}.ack.refused", tags=self._tags(task=task_id))

    def epoch_decided(self, meta: Any, barrier: Any, handles: dict[str, Any],
                      last_completed_at: str | None) -> None:
        stats = _stats()
        decided = parse_iso(meta.decided_at)
        if meta.completed:
            stats.incr(f"{PREFIX}.epoch.completed", tags=self._tags())
            if barrier is not None:
                stats.timing(f"{PREFIX}.epoch.duration", timedelta(
                    seconds=max(0.0, decided - parse_iso(barrier.created_at))),
                    tags=self._tags())
            stats.gauge(f"{PREFIX}.epoch.state_size",
                        sum(h.state_size for h in handles.values()), tags=self._tags())
            stats.gauge(f"{PREFIX}.epoch.incremental_size",
                        sum(h.state_bytes_uploaded for h in handles.values()),
                        tags=self._tags())
            stats.gauge(f"{PREFIX}.epoch.outputs_staged_size",
                        sum(h.outputs_staged_bytes for h in handles.values()),
                        tags=self._tags())
            stats.gauge(f"{PREFIX}.last_completed_age", 0, tags=self._tags())
            return
        stats.incr(f"{PREFIX}.epoch.aborted", tags=self._tags(reason=meta.reason))
        if last_completed_at is not None:
            stats.gauge(f"{PREFIX}.last_completed_age",
                        max(0.0, decided - parse_iso(last_completed_at)), tags=self._tags())

    def tables_committed(self, meta: Any, barrier: Any, tables: list[Any]) -> None:
        # An epoch is published by its last acknowledgement and again by the commit step
        # (PROTOCOL 6.5): the second finds the table committed and commits nothing. Only a
        # commit that made a table version is timed and counted, so that the timer's count
        # is the tables' new versions.
        stats = _stats()
        for t in tables:
            if t.committed:
                tags = self._tags(output=t.output)
                stats.timing(f"{PREFIX}.table.commit", timedelta(seconds=t.seconds),
                             tags=tags)
                stats.incr(f"{PREFIX}.table.commits", tags=tags)
