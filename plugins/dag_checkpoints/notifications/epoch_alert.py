"""Alerts for aborted epochs, through Airflow's own mechanisms.

Every alert is a log line and a record in checkpoint storage (``epochs/<id>/alert.json``,
create-once: the process whose record lands is the one that tells people, so an abort seen
by the commit step *and* by the deadline callback is announced once). Delivery to people
goes through Airflow notifiers: ``HttpNotifier`` for a webhook (a Slack incoming webhook
takes the same JSON ``text``) and ``SmtpNotifier`` for mail, each configured with an Airflow
connection id.
"""

from __future__ import annotations

import html
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from checkpointing import Barrier, EpochMetadata
from checkpointing.coordination.pipeline_records import PipelineRecords
from checkpointing.coordination.staleness import StaleAlert, StaleResolved
from checkpointing.errors import CheckpointError
from checkpointing.records.alerts import EpochAlert

log = logging.getLogger("dag_checkpoints.notifications")


class AlertLedger(Protocol):
    """Where a pipeline's alerts are recorded once: what announcing needs, a coordinator
    or the abort listener built before one."""

    @property
    def pipeline_id(self) -> str: ...

    @property
    def records(self) -> PipelineRecords: ...


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

    def notifiers(self, alert: EpochAlert | StaleAlert | StaleResolved) -> list[Any]:
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


def announce(coord: AlertLedger, meta: EpochMetadata, barrier: Barrier | None,
             settings: AlertSettings, context: Mapping[str, Any] | None = None
             ) -> EpochAlert | None:
    """Record and deliver the alert of an aborted epoch, unless another process already
    did; the process that did also delivers the lineage's staleness alert, if it is due
    (:func:`announce_stale`). Returns the abort's alert when this call announced it. Never
    raises for a failing channel: the abort stands whatever the mail server says."""
    if meta.completed:
        return None
    alert = EpochAlert.from_abort(coord.pipeline_id, meta, barrier)
    if not coord.records.record_alert(alert):
        return None  # announced, and staleness checked, by whoever recorded it
    _deliver(alert, settings, context, f"epoch {alert.epoch_id}")
    announce_stale(coord, settings, meta.lineage or "main", context)
    return alert


def announce_stale(coord: AlertLedger, settings: AlertSettings, lineage: str = "main",
                   context: Mapping[str, Any] | None = None) -> StaleAlert | None:
    """Deliver the lineage's staleness alert when its last completed epoch is older than
    the configured ``max_epoch_age_seconds`` and no process alerted for this stale period
    yet (checked at every abort and every begin). Never raises: an alert that cannot be
    checked is logged, the caller's work goes on."""
    try:
        alert = coord.records.stale_alert(lineage)
    except CheckpointError as exc:
        log.warning("staleness of %s not checked: %s", coord.pipeline_id, exc)
        return None
    if alert is not None:
        _deliver(alert, settings, context, f"lineage {lineage}")
    return alert


def announce_resolved(coord: AlertLedger, settings: AlertSettings, lineage: str = "main",
                      context: Mapping[str, Any] | None = None) -> list[StaleResolved]:
    """Deliver one "resolved" notice for each stale period of the lineage that an epoch
    completed since ended, unless another process did. Never raises."""
    try:
        ended = coord.records.stale_resolved(lineage)
    except CheckpointError as exc:
        log.warning("end of staleness of %s not checked: %s", coord.pipeline_id, exc)
        return []
    for resolved in ended:
        _deliver(resolved, settings, context, f"lineage {lineage}")
    return ended


def _deliver(alert: EpochAlert | StaleAlert | StaleResolved, settings: AlertSettings,
             context: Mapping[str, Any] | None, what: str) -> None:
    if isinstance(alert, StaleResolved):
        log.warning("CHECKPOINT RESOLVED %s", alert.message())
    else:
        log.error("CHECKPOINT ALERT %s", alert.message())
    for notifier in settings.notifiers(alert):
        try:
            notifier.notify(context or {})
        except Exception as exc:  # one channel down must not silence the others
            log.error("alert channel %s failed for %s: %s", type(notifier).__name__, what, exc)
