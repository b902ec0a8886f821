"""The Deadline Alert's work-around for `airflow dags test`, tied to its upstream defect."""

from __future__ import annotations

import sys

from checkpointing import CheckpointConfig


def _settings():
    from dag_checkpoints import CheckpointSettings

    return CheckpointSettings(pipeline_id="p", storage="file:///tmp/ckpt",
                              config=CheckpointConfig(timeout_seconds=60))


def test_the_pinned_airflow_still_has_the_dags_test_deadline_defect():
    """Fails once Airflow fixes apache/airflow#73428: the `dags test` branch of
    deadline_alert can then go (with this test)."""
    from dag_checkpoints.shared.timeouts import dags_test_crashes_on_deadline_alerts

    assert dags_test_crashes_on_deadline_alerts(), (
        "apache/airflow#73428 is fixed in the installed Airflow: remove the `dags test` "
        "work-around from dag_checkpoints.shared.timeouts.deadline_alert")


def test_the_alert_is_left_out_only_under_dags_test(monkeypatch):
    from dag_checkpoints.shared import timeouts

    monkeypatch.setattr(sys, "argv", ["airflow", "dags", "test", "d"])
    assert timeouts.deadline_alert(_settings()) is None
    monkeypatch.setattr(timeouts, "dags_test_crashes_on_deadline_alerts", lambda: False)
    assert timeouts.deadline_alert(_settings()) is not None  # a fixed Airflow keeps it
    monkeypatch.setattr(sys, "argv", ["airflow", "dag-processor"])
    assert timeouts.deadline_alert(_settings()).callback.kwargs == {"pipeline_id": "p"}
