"""The work-arounds of Airflow defects."""

from __future__ import annotations

import pytest


def test_work_around_for_clearing_runs_with_a_queued_at_deadline():
    """apache/airflow#70368: the installed Airflow hands the stored JSON interval of a
    Deadline Alert to ``timedelta`` when a run is cleared (a 500 in the UI and for a
    backfill over existing runs). The work-around is applied while the defect is there,
    and decodes what Airflow stores."""
    from datetime import timedelta

    from airflow.models import taskinstance
    from airflow.sdk.serde import serialize
    from dag_checkpoints.server import airflow_fixes

    stored = serialize(timedelta(seconds=3600))
    assert isinstance(stored, dict)  # what 3.3 keeps in deadline_alert.interval
    with pytest.raises(TypeError):
        timedelta(seconds=stored)  # the defect itself
    assert airflow_fixes.stored_interval(stored) == timedelta(hours=1)
    assert airflow_fixes.stored_interval(90.0) == timedelta(seconds=90)
    assert airflow_fixes.apply() == ["apache/airflow#70368"]
    assert taskinstance._recalculate_dagrun_queued_at_deadlines.ckpt_work_around
    assert airflow_fixes.apply() == ["apache/airflow#70368"]  # once, idempotent
