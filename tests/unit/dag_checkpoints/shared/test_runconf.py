"""The checkpoint part of a DAG run's conf."""

from __future__ import annotations


def test_checkpoint_conf_of_a_run():
    from dag_checkpoints.shared.runconf import checkpoint_conf

    assert checkpoint_conf(None) == {} and checkpoint_conf({"other": 1}) == {}
    assert checkpoint_conf({"checkpoint": {"lineage": "bf-1"}}) == {"lineage": "bf-1"}


def test_checkpointing_is_disabled_only_by_an_explicit_false():
    from types import SimpleNamespace

    from dag_checkpoints.shared.runconf import checkpointing_enabled

    def ctx(conf):
        return {"dag_run": SimpleNamespace(conf=conf)}

    assert checkpointing_enabled({}) and checkpointing_enabled(ctx(None))
    assert checkpointing_enabled(ctx({"checkpoint": {"enabled": True}}))
    assert checkpointing_enabled(ctx({"checkpoint": {"enabled": "false"}}))  # not a bool
    assert not checkpointing_enabled(ctx({"checkpoint": {"enabled": False}}))
