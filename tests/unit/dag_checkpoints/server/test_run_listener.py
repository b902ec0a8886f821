"""Airflow's DAG-run listener."""

from __future__ import annotations


def test_a_run_that_ended_has_its_pending_epochs_cancelled_by_the_listener(tmp_path, capfd,
                                                                        caplog):
    """Airflow's on_dag_run_failed with the run's DAG as the api-server holds it (serialized):
    the listener reads the DAG's settings from its begin step and cancels the run's pending
    epoch in the background; a DAG without checkpoint steps is left alone; a registry that
    cannot be read is one logged line (no path in it), nothing raised."""
    from types import SimpleNamespace

    from airflow.sdk import DAG
    from airflow.sdk.bases.operator import BaseOperator
    from airflow.serialization.serialized_objects import DagSerialization
    from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag
    from dag_checkpoints.server import run_listener

    from checkpointing import Coordinator
    from checkpointing.protocol.barrier import TaskPlan
    from checkpointing.storage import LocalStorage

    class Plain(BaseOperator):
        def execute(self, context):  # pragma: no cover - never run here
            return None

    with DAG("listener_test", schedule=None) as dag:
        CheckpointedSparkOperator(task_id="a", job="spark_jobs.flights.stats:route_stats")
    checkpoint_dag(dag, CheckpointSettings("listener_test", storage=f"file://{tmp_path}/ckpt"))
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "listener_test")
    b = c.begin_epoch({"a": TaskPlan((), False)}, "manual__1")

    thread = run_listener._cancel_in_background(
        SimpleNamespace(dag=served, run_id="manual__1"), "failed",
        "Dag Run's state was manually set to `failed`.")
    thread.join(30)
    meta = c.decision(b.epoch_id)
    assert (meta.status, meta.reason) == ("aborted", "cancelled"), meta
    assert meta.detail == ("its DAG run ended failed before the epoch was decided (Dag Run's "
                           "state was manually set to `failed`.)")
    assert c.registry().lineage("main").consecutive_failed == 0

    with DAG("listener_plain", schedule=None) as plain:
        Plain(task_id="p")
    assert run_listener._cancel_in_background(
        SimpleNamespace(dag=DagSerialization.from_dict(DagSerialization.to_dict(plain)),
                        run_id="manual__1"), "failed", "m") is None

    bad = Coordinator(LocalStorage(tmp_path / "bad"), "listener_test")
    (tmp_path / "bad" / bad.layout.counter).parent.mkdir(parents=True)
    (tmp_path / "bad" / bad.layout.counter).write_text("{not json")
    unreadable = CheckpointSettings("listener_test", storage=f"file://{tmp_path}/bad")
    capfd.readouterr()
    caplog.clear()
    assert run_listener.cancel_run_epochs(unreadable, "manual__1", "d") == []
    # Once Airflow configured logging, its handler writes to the process's stdout; else
    # pytest's handler has the record.
    logged = caplog.text + "".join(capfd.readouterr())
    assert "the pending epochs of run manual__1 were not cancelled (MalformedDocument)" \
        in logged and str(tmp_path) not in logged, logged
