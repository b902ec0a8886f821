"""Drills: fault injection, off unless the deployment enables it."""

from __future__ import annotations

import pytest


def test_fault_injection_is_a_drill_refused_unless_the_deployment_enables_drills(monkeypatch):
    """Whoever may trigger a DAG with a conf could fail or hang its tasks: a run's
    fault_inject (or a worker's CKPT_FAULT_INJECT) is refused in one line unless Airflow's
    [dag_checkpoints] drills is on; with it, the drill runs as asked."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException
    from dag_checkpoints.task.drills import FAULT_ENV, fault_spec

    monkeypatch.delenv(FAULT_ENV, raising=False)
    drill = {"dag_run": SimpleNamespace(conf={"checkpoint": {"fault_inject": "stats:1"}})}
    plain = {"dag_run": SimpleNamespace(conf={})}
    monkeypatch.delenv("AIRFLOW__DAG_CHECKPOINTS__DRILLS", raising=False)
    assert fault_spec(plain) == ""  # no drill asked: nothing to refuse
    with pytest.raises(AirflowFailException) as refused:
        fault_spec(drill)
    assert str(refused.value) == (
        "fault injection ('stats:1') is a drill, and drills are off in this deployment: "
        "the run is refused before its epoch begins; enable them with "
        "AIRFLOW__DAG_CHECKPOINTS__DRILLS=True on the workers")
    monkeypatch.setenv(FAULT_ENV, "stats:2:hang")
    with pytest.raises(AirflowFailException, match="drills are off"):
        fault_spec(plain)
    monkeypatch.setenv("AIRFLOW__DAG_CHECKPOINTS__DRILLS", "True")
    assert fault_spec(drill) == "stats:1" and fault_spec(plain) == "stats:2:hang"
