"""The provider's metrics."""

from __future__ import annotations


def test_metrics_carry_the_dag_id_of_the_dag_the_settings_checkpoint(tmp_path, monkeypatch):
    """The documented dag_id tag: settings that checkpoint_dag gave a DAG's steps make
    coordinators whose metrics listener tags the DAG (and the pipeline)."""
    from dataclasses import replace

    from dag_checkpoints import CheckpointSettings

    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    settings = replace(CheckpointSettings("dag_tag", storage=f"file://{tmp_path}/ckpt"),
                       dag_id="dag_tag_dag")
    assert settings.coordinator().listener.inner.tags == {"pipeline": "dag_tag",
                                                          "dag_id": "dag_tag_dag"}
    assert CheckpointSettings.from_kwargs(settings.to_kwargs()).dag_id == "dag_tag_dag"
