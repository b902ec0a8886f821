"""The names the flat layout had still work for one release, each with a
DeprecationWarning naming where it went, and give the very object it moved to."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize(("old", "new"), [
    ("checkpointing.delta", "checkpointing.tables.delta"),
    ("checkpointing.coordinator", "checkpointing.coordination.coordinator"),
    ("checkpointing.lineages", "checkpointing.records.backfill_lineages"),
    ("checkpointing.cli", "checkpointing.ckpt"),
])
def test_an_old_module_name_imports_the_moved_module_with_a_warning(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_old_tables_module_s_names_come_from_tables_spec():
    from checkpointing.tables.spec import TableSpec

    with pytest.warns(DeprecationWarning, match="checkpointing.tables.spec.TableSpec"):
        from checkpointing.tables import TableSpec as old
    assert old is TableSpec
    with pytest.raises(ImportError):
        from checkpointing.tables import no_such_name  # noqa: F401


def test_a_moved_coordinator_method_warns_and_works(tmp_path):
    from checkpointing import Coordinator, LocalStorage

    c = Coordinator(LocalStorage(tmp_path), "p")
    with pytest.warns(DeprecationWarning, match="Coordinator.failures.exhausted"):
        assert c.failure_budget_exhausted() is False
    with pytest.warns(DeprecationWarning, match="Coordinator.runs.epochs_of_run"):
        assert c.epochs_of_run("r") == []
    with pytest.raises(AttributeError, match="no attribute 'begin_epochs'"):
        c.begin_epochs  # noqa: B018 - a typo is an error, not a moved name


def test_a_moved_provider_name_warns_and_works():
    from dag_checkpoints.hooks import spark as hooks
    from dag_checkpoints.operators import spark

    with pytest.warns(DeprecationWarning,
                      match="dag_checkpoints.hooks.spark.check_master_reachable"):
        assert spark.check_master_reachable is hooks.check_master_reachable
    with pytest.raises(AttributeError):
        spark.no_such_name  # noqa: B018
