"""Incremental views run on Spark: the same plans whose rules the unit tier checks on
DuckDB, as Spark SQL on the test process's Spark Connect server, their states kept as
Parquet between epochs and read back by a session that did not write them (every
temporary view dropped between epochs, as a new job's session starts). After every epoch
of a drawn change history, each view's maintained result equals Spark's own batch run of
the view's query over the tables at that point."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from checkpointing.ivm.maintain import run_epoch
from checkpointing.ivm.planner import plan_view
from checkpointing.ivm.rules import input_relation, program
from tests.support.ivm_duckdb import _norm
from tests.support.ivm_histories import ORDER_OPS, SCHEMAS, VIEWS, _apply

EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "1"))
#: `make test` runs RICH; `make soak` (CKPT_HISTORY_EXAMPLES) draws histories too
PHASES = [Phase.explicit, *([Phase.generate] if "CKPT_HISTORY_EXAMPLES" in os.environ
                            else [])]
#: every kind of change, several per epoch (Hypothesis's first drawn history is its
#: simplest: one insert per epoch, nothing ever removed)
RICH = [[("insert", "c0", 10, "d0"), ("insert", "c1", None, "d1"), ("insert", None, 55, None),
         ("insert", "c2", 70, "d0"), ("customer", "c1", "south")],
        [("delete", 1), ("move", 0, "c2"), ("duplicate", 2), ("insert", "c0", 99, "d1"),
         ("customer", None, "north")],
        [("reinsert", 0), ("drop_customer", 1), ("delete", 3), ("insert", "c1", 5, None),
         ("move", 2, None), ("customer", "c2", None)]]
#: the operators' kinds, one view each: aggregate (every function), join then aggregate,
#: DISTINCT, top-N, a semi-join, a view over a view, the outer joins, NOT IN, and EXISTS
#: with NOT EXISTS correlated by an inequality (four joins on the change relations)
ON_SPARK = ["per_customer", "join_then_aggregate", "distinct", "top_groups", "in_subquery",
            "view_over_a_view", "global", "left_join_then_aggregate", "two_left_joins",
            "not_exists_then_aggregate", "full_join_then_aggregate", "not_in_rows",
            "q21_shape"]
TYPES = {"bigint": "bigint", "string": "string"}


@pytest.fixture(scope="module")
def spark(spark_connect):
    from spark_jobs.runtime import spark_session

    # an earlier session of the process still open (a notebook's, another job's): the
    # engine's local checkpoints must stay with the session that made them
    earlier = spark_session("earlier", remote=spark_connect.url)
    session = spark_session("ivm", remote=spark_connect.url)
    yield session
    session.stop()
    earlier.stop()


def _frame(spark, table: str, rows: list[tuple], weights: list[int] | None):
    cols = ", ".join(f"{c} {TYPES[t]}" for c, t in SCHEMAS[table].items())
    if weights is not None:
        return spark.createDataFrame([(*r, w) for r, w in zip(rows, weights, strict=True)],
                                     f"{cols}, _w bigint")
    return spark.createDataFrame(rows, cols)


def _counts(df) -> Counter:
    names = df.columns
    w = names.index("_w") if "_w" in names else None
    out: Counter = Counter()
    for row in df.collect():
        values = tuple(_norm(v) for i, v in enumerate(row) if i != w)
        out[values] += row[w] if w is not None else 1
    return out


@settings(max_examples=EXAMPLES, deadline=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@seed(20261205)
@given(epochs=st.lists(st.lists(ORDER_OPS, min_size=1, max_size=6), min_size=2, max_size=3))
@example(epochs=RICH)
def test_views_maintained_on_spark_equal_spark_s_batch_query(spark, tmp_path_factory, epochs):
    from spark_jobs.runtime.views import ParquetStates, SparkEngine

    root = tmp_path_factory.mktemp("ivm-states")
    programs = {n: program(plan_view(VIEWS[n], SCHEMAS).root, f"{n}__") for n in ON_SPARK}
    maintained = {n: Counter() for n in ON_SPARK}
    tables: dict[str, list[tuple]] = {"orders": [], "customers": []}
    state = {"id": 0}
    for epoch, ops in enumerate([[("customer", "c0", "north"), ("customer", "c1", "south")],
                                 *epochs], start=1):
        for name in [t.name for t in spark.catalog.listTables() if t.isTemporary]:
            spark.catalog.dropTempView(name)  # a new session's view of the states
        with SparkEngine(spark, ParquetStates(spark, root, epoch, max_batches=2)) as engine:
            changes: dict[str, list] = {"orders": [], "customers": []}
            for op in ops:
                _apply(op, tables, changes, state)
            for t in SCHEMAS:
                _frame(spark, t, tables[t], None).createOrReplaceTempView(t)
                _frame(spark, t, [r for r, _ in changes[t]], [w for _, w in changes[t]]) \
                    .createOrReplaceTempView(input_relation(t))
            for n, prog in programs.items():
                out = run_epoch(prog, engine)
                maintained[n].update(_counts(engine.table(out)))
                maintained[n] = +maintained[n]
                assert maintained[n] == _counts(spark.sql(VIEWS[n])), (n, epoch, ops)
