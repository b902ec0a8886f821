"""Delta table inputs named in Spark's catalog (PROTOCOL 6.14, 1.19): what is refused
before any metastore is read, and how a catalog's location is spelled for a table input.
The lookup itself runs against a real PostgreSQL metastore written by Spark
(tests/integration/test_spark_lakehouse.py)."""

from __future__ import annotations

import pytest

from checkpointing import Coordinator, LocalStorage, TableInput, TaskPlan
from checkpointing.protocol.barrier import plan_from_json, plan_to_json
from checkpointing.protocol.table_inputs import TableInputError
from checkpointing.tables.metastore import MetastoreNames, project_uri
from checkpointing.tables.pins import TablePins


def test_a_delta_input_may_be_declared_by_its_catalog_name():
    spec = TableInput(name="bronze.orders")
    assert spec.location is None and spec.label == "bronze.orders"
    resolved = TableInput("s3://lake/bronze/orders", name="bronze.orders")
    plan = {"agg": TaskPlan(table_inputs={"src": resolved})}
    assert plan_from_json(plan_to_json(plan)) == plan  # the barrier keeps both
    for bad in ("orders", "a.b.c", "bronze.or-ders"):
        with pytest.raises(ValueError, match="schema.table"):
            TableInput(name=bad)
    with pytest.raises(ValueError, match="its location, or its name"):
        TableInput()


@pytest.mark.parametrize("url, words", [
    (None, "no metastore is configured: set CKPT_METASTORE_URL"),
    ("jdbc:derby:;databaseName=/var/lib/ckpt/metastore;create=true", "embedded Derby"),
    ("jdbc:mysql://db/metastore", "must be a jdbc:postgresql: URL"),
])
def test_a_name_the_begin_cannot_look_up_is_refused_in_one_line(tmp_path, url, words):
    """The begin refuses before it allocates an id: no barrier, no burned id."""
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "named",
                    table_pins=TablePins(names=MetastoreNames(url, "spark", "s3cret")))
    plan = {"agg": TaskPlan(table_inputs={"src": TableInput(name="bronze.orders")})}
    with pytest.raises(TableInputError, match=words) as refused:
        c.begin_epoch(plan, "r1")
    line = str(refused.value)
    assert "\n" not in line and "bronze.orders" in line and "s3cret" not in line
    assert c.store.registry().last_epoch_id == 0


def test_a_plan_without_catalog_names_reads_no_metastore(tmp_path):
    """Only a named input makes the begin look at the metastore: here none is set, and a
    plan of located inputs begins as before."""
    import pandas as pd
    from deltalake import write_deltalake

    loc = f"file://{tmp_path}/orders"
    write_deltalake(loc, pd.DataFrame({"k": ["a"]}))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "located",
                    table_pins=TablePins(names=MetastoreNames(None)))
    barrier = c.begin_epoch({"agg": TaskPlan(table_inputs={"src": TableInput(loc)})}, "r1")
    assert barrier.plan["agg"].table_inputs["src"] == TableInput(loc)
    assert barrier.table_version("src").version == 0


def test_catalog_locations_are_spelled_as_table_inputs_spell_them():
    assert project_uri("file:/data/bronze/orders") == "file:///data/bronze/orders"
    assert project_uri("file:///data/bronze/orders/") == "file:///data/bronze/orders"
    assert project_uri("s3a://lake/bronze/orders") == "s3://lake/bronze/orders"
    assert project_uri("s3://lake/bronze/orders") == "s3://lake/bronze/orders"
