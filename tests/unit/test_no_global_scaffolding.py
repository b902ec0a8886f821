"""Importing the library changes nothing outside it: no import hook, no module aliases of
the flat layout, no attribute served by ``__getattr__``. The names the flat layout had are
gone (CHANGELOG: removed), so an old import fails where it is written."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def test_importing_the_library_and_the_provider_installs_no_import_hook():
    """(Airflow's dependencies add their own finders, six's and importlib_metadata's.)"""
    code = ("import sys; before = list(sys.meta_path); import checkpointing, "
            "checkpointing.tables, dag_checkpoints.operators.spark, spark_jobs.runtime; "
            "print(sorted(type(m).__module__ for m in sys.meta_path if m not in before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    added = out.stdout.strip().splitlines()[-1]
    assert not any(own in added for own in ("checkpointing", "dag_checkpoints",
                                            "spark_jobs")), added


@pytest.mark.parametrize("old", ["checkpointing.delta", "checkpointing.coordinator",
                                 "checkpointing.lineages", "checkpointing.cli"])
def test_a_flat_layout_module_name_is_not_found(old):
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_no_name_is_served_from_elsewhere(tmp_path):
    from dag_checkpoints.operators import spark

    from checkpointing import Coordinator, LocalStorage

    c = Coordinator(LocalStorage(tmp_path), "p")
    with pytest.raises(AttributeError):
        c.failure_budget_exhausted  # noqa: B018 - now c.failures_exhausted()
    with pytest.raises(ImportError):
        from checkpointing.tables import TableSpec  # noqa: F401 - now tables.spec
    with pytest.raises(AttributeError):
        spark.check_master_reachable  # noqa: B018 - now hooks.spark
    for module in (importlib.import_module("checkpointing"),
                   importlib.import_module("checkpointing.tables"), spark):
        assert "__getattr__" not in vars(module), module.__name__
    assert not hasattr(Coordinator, "__getattr__")


def test_the_coordinator_s_abort_listener_is_fixed_when_it_is_built(tmp_path):
    """Announcing an abort is a collaborator passed in, not a hook set on a built
    coordinator: its decisions call the one given, and there is no attribute to set."""
    from checkpointing import Coordinator, LocalStorage
    from tests.support.helpers import DIAMOND

    heard = []
    c = Coordinator(LocalStorage(tmp_path), "p", on_abort=lambda m, _b: heard.append(m.epoch_id))
    assert "on_abort" not in vars(c)
    epoch = c.begin_epoch(DIAMOND, "r").epoch_id
    c.abort(epoch, "cancelled", "a test")
    c.abort(epoch, "cancelled", "again")  # decided once: announced once
    assert heard == [epoch]


def test_the_coordinator_s_parts_are_its_own(tmp_path):
    """Callers ask the coordinator; they do not reach through it to the parts of the
    protocol (its run index, failure budget, table pins, finisher, ...). What it does
    expose: where it keeps documents, and its two record facets (the read-only catalog,
    the write-once records)."""
    from checkpointing import Coordinator, LocalStorage

    c = Coordinator(LocalStorage(tmp_path), "p")
    public = {k for k in vars(c) if not k.startswith("_")}
    assert public == {"storage", "layout", "pipeline_id", "config", "clock", "store",
                      "catalog", "records", "endpoint_url"}
    assert c.open_epoch_for_run("r") is None and c.epochs_of_run("r") == []
    assert c.completed_epoch_of_run("r") is None and not c.failures_exhausted()
