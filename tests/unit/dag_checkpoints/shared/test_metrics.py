"""The provider's metrics."""

from __future__ import annotations

from dag_checkpoints import CheckpointHook


def test_metrics_carry_the_dag_id_of_the_dag_the_settings_checkpoint(tmp_path, monkeypatch):
    """The documented dag_id tag: settings that checkpoint_dag gave a DAG's steps make
    coordinators whose metrics listener tags the DAG (and the pipeline)."""
    from dataclasses import replace

    from dag_checkpoints import CheckpointSettings

    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    settings = replace(CheckpointSettings("dag_tag", storage=f"file://{tmp_path}/ckpt"),
                       dag_id="dag_tag_dag")
    listener = CheckpointHook(settings).get_coordinator()._listener
    assert listener.inner.tags == {"pipeline": "dag_tag", "dag_id": "dag_tag_dag"}
    assert CheckpointSettings.from_kwargs(settings.to_kwargs()).dag_id == "dag_tag_dag"


def test_the_commit_timer_counts_table_versions_not_publishes(monkeypatch):
    """An epoch's outputs are published by its last acknowledgement and again by the
    commit step, which finds them committed: only the commit that made a version is timed
    and counted (a dashboard counting the timer counts table versions)."""
    from dag_checkpoints.shared import metrics

    from checkpointing.protocol.listener import TableCommitted

    sent: list[tuple[str, str]] = []

    class Stats:
        def timing(self, name, value, tags):
            sent.append(("timing", name))

        def incr(self, name, tags):
            sent.append(("incr", name))

    monkeypatch.setattr(metrics, "_stats", Stats)
    listener = metrics.AirflowMetrics("p", "d")
    listener.tables_committed(None, None, [TableCommitted("sums", 4, True, 0.02),
                                           TableCommitted("other", 7, True, 0.03)])
    listener.tables_committed(None, None, [TableCommitted("sums", 4, False, 0.001),
                                           TableCommitted("other", 7, False, 0.001)])
    assert sorted(sent) == sorted([("timing", "dag_checkpoints.table.commit"),
                                   ("incr", "dag_checkpoints.table.commits")] * 2)
