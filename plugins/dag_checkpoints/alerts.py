"""Alerts for aborted epochs, through Airflow's own mechanisms.

Every alert is a log line and a record in checkpoint storage (``epochs/<id>/alert.json``,
create-once: the process whose record lands is the one that tells people, so an abort seen
by the commit step *and* by the deadline callback is announced once). Delivery to people
goes through Airflow notifiers: ``HttpNotifier`` for a webhook (a Slack incoming webhook
takes the same JSON ``text``) and ``SmtpNotifier`` for mail, each configured with an Airflow
connection id.

The timeout path: a DAG-level Deadline Alert (see :func:`deadline_alert`) fires in the
triggerer when a run is not finished in time; :func:`deadline_missed` aborts the run's epoch
with reason ``timeout`` (naming the tasks that did not acknowledge) and announces it.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import sys
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from checkpointing import Barrier, Coordinator, EpochMetadata
from checkpointing.alerts import EpochAlert, record_alert

log = logging.getLogger("dag_checkpoints.alerts")


def _env_list(name: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in os.environ.get(name, "").split(",") if x.strip())


@dataclass(frozen=True)
class AlertSettings:
    """Where alerts go besides the log and checkpoint storage. Connection ids name Airflow
    connections (so secrets stay in Airflow's secrets backend, never in a DAG file)."""

    webhook_conn_id: str | None = field(
        default_factory=lambda: os.environ.get("CKPT_ALERT_WEBHOOK_CONN") or None)
    webhook_endpoint: str | None = field(
        default_factory=lambda: os.environ.get("CKPT_ALERT_WEBHOOK_ENDPOINT") or None)
    email_to: tuple[str, ...] = field(default_factory=lambda: _env_list("CKPT_ALERT_EMAIL"))
    smtp_conn_id: str | None = field(
        default_factory=lambda: os.environ.get("CKPT_ALERT_SMTP_CONN") or None)
    email_from: str = field(
        default_factory=lambda: os.environ.get("CKPT_ALERT_EMAIL_FROM", "airflow@localhost"))

    def to_kwargs(self) -> dict[str, Any]:
        """JSON-safe form, for a Deadline Alert callback's kwargs."""
        d = asdict(self)
        d["email_to"] = list(self.email_to)
        return d

    @classmethod
    def from_kwargs(cls, d: dict[str, Any]) -> AlertSettings:
        return cls(d.get("webhook_conn_id"), d.get("webhook_endpoint"),
                   tuple(d.get("email_to") or ()), d.get("smtp_conn_id"),
                   d.get("email_from") or "airflow@localhost")

    def notifiers(self, alert: EpochAlert) -> list[Any]:
        """The Airflow notifiers that deliver ``alert``."""
        out: list[Any] = []
        if self.webhook_conn_id:
            from airflow.providers.http.notifications.http import HttpNotifier

            out.append(HttpNotifier(http_conn_id=self.webhook_conn_id,
                                    endpoint=self.webhook_endpoint,
                                    json={"text": alert.message(), "alert": alert.to_json()}))
        if self.email_to:
            from airflow.providers.smtp.notifications.smtp import SmtpNotifier

            out.append(SmtpNotifier(to=list(self.email_to), from_email=self.email_from,
                                    subject=alert.title,
                                    html_content=f"<p>{html.escape(alert.message())}</p>",
                                    smtp_conn_id=self.smtp_conn_id))
        return out


def announce(coord: Coordinator, meta: EpochMetadata, barrier: Barrier | None,
             settings: AlertSettings, context: dict[str, Any] | None = None) -> EpochAlert | None:
    """Record and deliver the alert of an aborted epoch, unless another process already
    did. Returns the alert when this call announced it. Never raises for a failing channel:
    the abort stands whatever the mail server says."""
    if meta.completed:
        return None
    alert = EpochAlert.from_abort(coord.pipeline_id, meta, barrier)
    if not record_alert(coord.storage, coord.layout, alert):
        return None
    log.error("CHECKPOINT ALERT %s", alert.message())
    for notifier in settings.notifiers(alert):
        try:
            notifier.notify(context or {})
        except Exception as exc:  # one channel down must not silence the others
            log.error("alert channel %s failed for epoch %d: %s", type(notifier).__name__,
                      alert.epoch_id, exc)
    return alert


def deadline_alert(settings: Any) -> Any | None:
    """A DAG-level Deadline Alert, the run-level backstop of the checkpoint timeout: when a
    run is not finished ``timeout_seconds`` after it was queued, :func:`deadline_missed`
    runs in the triggerer and expires the run's epoch if its own deadline (counted from its
    barrier) has passed. The per-epoch watchdog task (``checkpoint_timeout``) is what
    enforces the timeout; this alert only catches an epoch whose watchdog is gone.
    ``settings`` is the DAG's CheckpointSettings."""
    from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference

    if sys.argv[1:3] == ["dags", "test"]:
        # Airflow 3.3.2's `dags test` never stores the DAG's deadline alerts, then looks
        # them up when the run ends and crashes ('dict' object has no attribute 'hex').
        # A foreground test run has no triggerer to fire them anyway.
        log.warning("airflow dags test: the checkpoint-timeout Deadline Alert is left out")
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=settings.config.timeout_seconds),
        callback=AsyncCallback(f"{__name__}.deadline_missed",
                               kwargs={"checkpoint": settings.to_kwargs()}),
        name="checkpoint timeout",
    )


async def deadline_missed(context: dict[str, Any] | None = None, *,
                          checkpoint: dict[str, Any], **_: Any) -> None:
    """Deadline Alert callback (triggerer). Returns nothing: Airflow stores a callback's
    result in a text column, and a dict there killed the triggerer. Never waits: an epoch
    not yet past its barrier's deadline is left to its watchdog (a run that waited in the
    queue opened its epoch late, and its timeout counts from then)."""
    try:
        await asyncio.to_thread(_expire_run, context or {}, checkpoint)
    except Exception:  # the triggerer must survive whatever storage says
        log.exception("checkpoint deadline callback failed")


def _expire_run(context: dict[str, Any], checkpoint: dict[str, Any]) -> None:
    from .settings import CheckpointSettings
    from .timeouts import expire_epoch

    settings = CheckpointSettings.from_kwargs(checkpoint)
    run_id = (context.get("dag_run") or {}).get("dag_run_id")
    coord = settings.coordinator()
    barrier = coord.open_epoch_for_run(run_id, lineage=_lineage_of(context)) if run_id else None
    if barrier is None:
        log.info("deadline missed for run %s, which has no open epoch of %s (queued, or "
                 "already decided)", run_id, settings.pipeline_id)
        return
    meta = expire_epoch(settings, coord, barrier, context)
    if meta is None:
        log.info("deadline missed for run %s; its epoch %d opened later, its own deadline "
                 "%s is enforced by its watchdog", run_id, barrier.epoch_id, barrier.deadline)


def _lineage_of(context: dict[str, Any]) -> str:
    from .runconf import checkpoint_conf

    return str(checkpoint_conf((context.get("dag_run") or {}).get("conf")).get("lineage")
               or "main")
