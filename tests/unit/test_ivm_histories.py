"""Incremental views over histories: Hypothesis draws change streams on two tables
(inserts, deletes, updates that move a row between groups, duplicates, NULL keys and
values, a row deleted and inserted again in one epoch), and after every epoch each view's
maintained result (the sum of the changes its plan produced) equals the same query run as a
batch over the tables at that point. The plans' rules run on DuckDB here (no JVM); the
batch query is DuckDB's own run of the view's SQL."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from checkpointing.ivm.maintain import run_epoch
from checkpointing.ivm.planner import plan_view
from checkpointing.ivm.rules import input_relation, program
from tests.support.ivm_duckdb import DuckDBEngine, _norm, connect, in_duckdb
from tests.support.ivm_histories import ORDER_OPS, SCHEMAS, VIEWS, _apply

duckdb = pytest.importorskip("duckdb")

EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "16"))


def _batch(con, sql: str) -> Counter:
    cur = con.execute(in_duckdb(sql))
    return Counter(tuple(_norm(v) for v in row) for row in cur.fetchall())


def _load(con, name: str, rows: list[tuple], columns: list[str], weights: list[int] | None):
    import pyarrow as pa

    types = {"bigint": pa.int64(), "string": pa.string()}
    data = {c: pa.array([r[i] for r in rows], types[SCHEMAS[name.split(":")[0]][c]])
            for i, c in enumerate(columns)}
    if weights is not None:
        data["_w"] = pa.array(weights, pa.int64())
    con.register("loaded", pa.table(data))
    target = name.split(":")[1] if ":" in name else name
    con.execute(f'CREATE OR REPLACE TABLE "{target}" AS SELECT * FROM loaded')
    con.unregister("loaded")


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@seed(20261205)
@given(epochs=st.lists(st.lists(ORDER_OPS, max_size=8), min_size=1, max_size=6))
def test_every_view_equals_its_batch_query_after_every_epoch(epochs):
    con = connect()
    engine = DuckDBEngine(con)
    plans = {name: plan_view(sql, SCHEMAS) for name, sql in VIEWS.items()}
    assert all(p.incremental for p in plans.values()), \
        {n: p.fallback for n, p in plans.items() if not p.incremental}
    # each view's relations under a namespace of its own, in one database
    programs = {name: program(p.root, f"{name}__") for name, p in plans.items()}
    maintained = {name: Counter() for name in VIEWS}
    tables: dict[str, list[tuple]] = {"orders": [], "customers": []}
    state = {"id": 0}
    for ops in [[], *epochs]:  # a first epoch over empty tables
        changes: dict[str, list] = {"orders": [], "customers": []}
        for op in ops:
            _apply(op, tables, changes, state)
        for t, cols in SCHEMAS.items():
            _load(con, t, tables[t], list(cols), None)
            _load(con, f"{t}:{input_relation(t)}", [r for r, _ in changes[t]], list(cols),
                  [w for _, w in changes[t]])
        for name, prog in programs.items():
            out = run_epoch(prog, engine)
            maintained[name].update(engine.weighted(out))
            maintained[name] = +maintained[name]
            assert not any(w < 0 for w in maintained[name].values())
            assert maintained[name] == _batch(con, VIEWS[name]), (name, ops)

