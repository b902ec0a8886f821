"""Alerts of aborted epochs and of stale pipelines, delivered by Airflow's own notifiers
(HTTP webhook, SMTP)."""

from .epoch_alert import AlertSettings, announce, announce_resolved, announce_stale

__all__ = ["AlertSettings", "announce", "announce_resolved", "announce_stale"]
