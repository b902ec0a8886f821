"""Alerts of aborted epochs, delivered by Airflow's own notifiers (HTTP webhook, SMTP)."""

from .epoch_alert import AlertSettings, announce

__all__ = ["AlertSettings", "announce"]
