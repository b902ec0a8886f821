"""A table input expecting a new version (PROTOCOL 6.14, 1.14), against a real Delta table
written by delta-rs: what a begin waits for, and what an epoch that pinned no new version
declines, read from the barriers alone."""

from __future__ import annotations

import pandas as pd
from deltalake import write_deltalake

from checkpointing import Coordinator, LocalStorage, TableInput, TaskPlan
from checkpointing.protocol.table_inputs import TableVersion
from checkpointing.tables.changes import pin
from checkpointing.tables.expectations import awaited_table_versions, unchanged_table_inputs
from tests.support.helpers import run_epoch


def _append(location: str, keys: list[str]) -> None:
    write_deltalake(location, pd.DataFrame({"k": keys}), mode="append")


def test_an_epoch_expects_a_version_newer_than_its_parents(tmp_path):
    loc = f"file://{tmp_path}/upstream/orders"
    _append(loc, ["a", "b"])  # version 0
    spec = TableInput(loc, expect_new_version=True)
    plan = {"agg": TaskPlan(table_inputs={"orders": spec}), "other": TaskPlan()}
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "downstream")
    assert awaited_table_versions(c, plan) == []  # no completed epoch: any version is new
    run_epoch(c, plan, tmp_path, run_id="r1")

    [awaited] = awaited_table_versions(c, plan)
    assert (awaited.name, awaited.last) == ("orders", 0)
    assert not awaited.met_by(pin(spec))
    b2 = c.begin_epoch(plan, "r2")  # the upstream committed nothing
    [line] = unchanged_table_inputs(c, b2.epoch_id, "agg")
    assert line == ("table 'orders' (input 'orders') has no version newer than 0 "
                    "(its newest: 0)"), line
    assert str(tmp_path) not in line
    assert unchanged_table_inputs(c, b2.epoch_id, "other") == []  # expects nothing
    c.register_attempt(b2.epoch_id, "agg", 1)
    c.decline(b2.epoch_id, "agg", 1, line)
    assert c.metadata(b2.epoch_id).reason == "declined"

    _append(loc, ["c"])  # version 1 lands
    assert awaited.met_by(pin(spec)) and awaited.met_by(TableVersion(1))
    # the parent is still epoch 1 (2 was declined): version 1 is new to it
    b3 = c.begin_epoch(plan, "r3")
    assert b3.parent_epoch_id == 1 and b3.table_version("orders") == TableVersion(1)
    assert unchanged_table_inputs(c, b3.epoch_id, "agg") == []


def test_only_declared_inputs_of_the_main_line_expect_anything(tmp_path):
    loc = f"file://{tmp_path}/upstream/orders"
    _append(loc, ["a"])
    plain = {"agg": TaskPlan(table_inputs={"orders": TableInput(loc)})}
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "downstream")
    run_epoch(c, plain, tmp_path, run_id="r1")
    assert awaited_table_versions(c, plain) == []
    b = c.begin_epoch(plain, "r2")
    assert unchanged_table_inputs(c, b.epoch_id, "agg") == []
    expecting = {"agg": TaskPlan(table_inputs={"orders": TableInput(
        loc, expect_new_version=True)})}
    assert awaited_table_versions(c, expecting, lineage="bf-2024") == []


def test_the_declaration_is_written_only_when_set():
    spec = TableInput("s3://lake/orders", expect_new_version=True)
    assert spec.to_json()["expect_new_version"] is True
    assert TableInput.from_json(spec.to_json()) == spec
    plain = TableInput("s3://lake/orders")
    assert "expect_new_version" not in plain.to_json()  # as a 1.13 writer left it
    assert TableInput.from_json({"format": "delta", "location": "s3://lake/orders"}) == plain


def _tree(root) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_reading_an_upstream_table_creates_nothing_in_it(tmp_path):
    """A reader needs only read rights: pinning, reading the change between versions and
    the first full read create no file or directory in the upstream table's location."""
    from checkpointing.tables.changes import changes

    table = tmp_path / "upstream" / "orders"
    loc = f"file://{table}"
    _append(loc, ["a", "b"])
    _append(loc, ["c"])
    before = _tree(table)
    spec = TableInput(loc)
    end = pin(spec)
    assert end == TableVersion(1)
    full = changes(spec, None, end)
    step = changes(spec, TableVersion(0), end)
    assert len(full.added) == 2 and len(step.added) == 1 and not step.removed
    assert _tree(table) == before, sorted(_tree(table) - before)
