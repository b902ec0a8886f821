"""TPC-H's 22 queries as views: every one is planned (none refused as a wrong query), the
ones with an incremental plan are listed, and those are maintained through refresh sets in
the spirit of TPC-H's refresh functions (new orders with their lineitems, deleted orders
with theirs), each epoch's maintained result equal to DuckDB's run of the query over the
tables at that point. Data: DuckDB's own TPC-H generator at a small scale factor."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from checkpointing.ivm.explain import explain
from checkpointing.ivm.maintain import run_epoch
from checkpointing.ivm.planner import plan_view
from checkpointing.ivm.rules import Step, input_relation, program
from tests.support.ivm_duckdb import DuckDBEngine, _norm, connect

duckdb = pytest.importorskip("duckdb")

#: the queries planned incrementally today; a query that leaves this set fails the test
INCREMENTAL = set(range(1, 23))


@pytest.fixture(scope="module")
def tpch():
    import duckdb_ext

    ext = list(Path(duckdb_ext.__path__[0]).glob("extensions/*/*/tpch.duckdb_extension"))
    assert ext, "duckdb-ext-tpch is not installed (requirements-dev.txt)"
    con = connect()
    con.execute(f"LOAD '{ext[0]}'")
    con.execute("CALL dbgen(sf = 0.05)")
    schemas: dict[str, dict[str, str]] = {}
    for t, c, ty in con.execute("SELECT table_name, column_name, data_type "
                                "FROM information_schema.columns").fetchall():
        schemas.setdefault(t, {})[c] = ty.lower()
    queries = dict(con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall())
    return con, schemas, queries


def test_every_query_is_planned_and_the_incremental_ones_are_listed(tpch):
    _, schemas, queries = tpch
    assert len(queries) == 22
    plans = {n: plan_view(q, schemas, dialect="duckdb") for n, q in queries.items()}
    incremental = {n for n, p in plans.items() if p.incremental}
    assert incremental >= INCREMENTAL, sorted(INCREMENTAL - incremental)
    for n, p in plans.items():
        assert p.incremental or (p.fallback and "\n" not in p.fallback), n
        assert explain(p)


def _inlined(prog) -> int:
    """The most statements one statement of ``prog`` holds once every relation it reads is
    inlined, as a temporary view inlines its query, except those computed once."""
    steps = [s for s in prog.steps if isinstance(s, Step)]
    size: dict[str, int] = {}
    for s in steps:  # a statement reads only earlier ones
        read = [m for t in steps if t.name in size
                for m in re.findall(rf"(?<![\w`]){re.escape(t.name)}(?![\w`])", s.sql)]
        size[s.name] = 1 + sum(1 if next(t for t in steps if t.name == r).shared
                               else size[r] for r in read)
    return max(size.values())


def test_no_statement_of_a_plan_inlines_more_than_the_plan(tpch):
    """A rule reads a child's change more than once: inlined, each level of a plan doubles
    what is below it (TPC-H Q21's maintenance did not fit in Spark's analyser with 2 GB).
    With the relations read twice computed once, no statement holds more statements than
    its program has; without, Q21's would hold thousands."""
    _, schemas, queries = tpch
    for n, query in queries.items():
        prog = program(plan_view(query, schemas, dialect="duckdb").root, f"q{n}__")
        assert _inlined(prog) <= len(prog.steps), n
    q21 = program(plan_view(queries[21], schemas, dialect="duckdb").root)
    unshared = replace(q21, steps=tuple(replace(s, shared=False) if isinstance(s, Step)
                                        else s for s in q21.steps))
    assert _inlined(unshared) > 100 * len(q21.steps)


def test_incremental_queries_equal_the_batch_query_through_refresh_sets(tpch):
    con, schemas, queries = tpch
    engine = DuckDBEngine(con)
    rng = random.Random(20261205)
    views = {n: program(plan_view(queries[n], schemas, dialect="duckdb").root, f"q{n}__")
             for n in sorted(INCREMENTAL)}
    maintained = {n: Counter() for n in views}
    moved: set[int] = set()  # the views whose result a refresh changed
    next_key = con.execute("SELECT max(o_orderkey) FROM orders").fetchone()[0] + 1
    for epoch in range(4):
        if epoch == 0:  # the first epoch reads the tables whole
            for t in ("orders", "lineitem", "customer", "nation", "region", "part",
                      "partsupp", "supplier"):
                con.execute(f'CREATE OR REPLACE TABLE "{input_relation(t)}" AS '
                            f"SELECT *, 1::BIGINT AS _w FROM {t}")
        else:
            next_key = _refresh(con, rng, next_key)
        for n, prog in views.items():
            out = run_epoch(prog, engine)
            change = +engine.weighted(out) + -engine.weighted(out)
            if epoch and change:
                moved.add(n)
            maintained[n].update(engine.weighted(out))
            maintained[n] = +maintained[n]
            batch = Counter(tuple(_norm(v) for v in row)
                            for row in con.execute(queries[n]).fetchall())
            assert maintained[n] == batch, (n, epoch)
    print("views a refresh changed:", sorted(moved))
    # at this scale a refresh moves no row of Q3's top-N, nor of Q18's and Q19's few
    # qualifying orders: those three are compared with a result the refresh left as it was
    assert len(moved) >= len(views) - 3, sorted(set(views) - moved)


#: a repriced part's new stock: sold out, or grown tenfold (Q20)
STOCK = "CASE WHEN ps_availqty % 2 = 0 THEN 0 ELSE ps_availqty * 10 END"


def _refresh(con, rng: random.Random, next_key: int) -> int:
    """RF1 and RF2 of about 2 % of orders: new orders (copies of existing ones under new
    keys, for any customer, with their lineitems) and deleted orders (with their
    lineitems), new supply costs and stock for about 2 % of partsupp, and complaints recorded or
    cleared for 2 % of suppliers; the other tables' change relations are empty."""
    n = max(1, con.execute("SELECT count(*) FROM orders").fetchone()[0] // 50)
    keys = [k for (k,) in con.execute("SELECT o_orderkey FROM orders").fetchall()]
    gone = rng.sample(keys, n)
    copied = rng.sample(keys, n)
    # as TPC-H's RF1, a new order's customer is anyone's (a third have no order yet)
    custs = [k for (k,) in con.execute("SELECT c_custkey FROM customer").fetchall()]
    con.execute("CREATE OR REPLACE TEMP TABLE moved AS SELECT * FROM (VALUES " +
                ", ".join(f"({k}, {next_key + i}, {rng.choice(custs)})"
                          for i, k in enumerate(copied)) + ") AS m(old, new, cust)")
    con.execute("CREATE OR REPLACE TEMP TABLE gone AS SELECT * FROM (VALUES " +
                ", ".join(f"({k})" for k in gone) + ") AS g(k)")
    con.execute(f"""CREATE OR REPLACE TABLE "{input_relation('orders')}" AS
        SELECT orders.* REPLACE (m.new AS o_orderkey, m.cust AS o_custkey), 1::BIGINT AS _w
        FROM orders JOIN moved m ON o_orderkey = m.old
        UNION ALL SELECT *, -1::BIGINT AS _w FROM orders WHERE o_orderkey IN
        (SELECT k FROM gone)""")
    con.execute(f"""CREATE OR REPLACE TABLE "{input_relation('lineitem')}" AS
        SELECT lineitem.* REPLACE (m.new AS l_orderkey), 1::BIGINT AS _w
        FROM lineitem JOIN moved m ON l_orderkey = m.old
        UNION ALL SELECT *, -1::BIGINT AS _w FROM lineitem WHERE l_orderkey IN
        (SELECT k FROM gone)""")
    for t in ("orders", "lineitem"):
        con.execute(f'DELETE FROM {t} WHERE {t[0]}_orderkey IN (SELECT k FROM gone)')
        con.execute(f'INSERT INTO {t} SELECT * EXCLUDE (_w) FROM "{input_relation(t)}" '
                    f"WHERE _w = 1")
    # and a price change of about 2 % of partsupp (its supply cost halved, its stock sold
    # out or grown tenfold: Q20 keeps the suppliers with stock to spare)
    # (and, among them, two of the six parts Q20 asks about at this scale, forest parts of
    # Canadian suppliers: 800 drawn from all of them rarely hold one)
    salt = rng.randrange(1 << 30)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE repriced AS SELECT DISTINCT * FROM (
        (SELECT ps_partkey AS pk, ps_suppkey AS sk FROM partsupp
         ORDER BY hash(ps_partkey * 31 + ps_suppkey + {salt}) LIMIT 800) UNION ALL
        (SELECT ps_partkey, ps_suppkey FROM partsupp JOIN part ON p_partkey = ps_partkey
         JOIN supplier ON s_suppkey = ps_suppkey JOIN nation ON n_nationkey = s_nationkey
         WHERE p_name LIKE 'forest%' AND n_name = 'CANADA'
         ORDER BY hash(ps_partkey * 31 + ps_suppkey + {salt}) LIMIT 2))""")
    con.execute(f"""CREATE OR REPLACE TABLE "{input_relation('partsupp')}" AS
        SELECT partsupp.* REPLACE (CAST(ps_supplycost / 2 AS DECIMAL(15, 2))
        AS ps_supplycost, {STOCK} AS ps_availqty), 1::BIGINT AS _w FROM partsupp JOIN repriced
        ON ps_partkey = pk AND ps_suppkey = sk
        UNION ALL SELECT partsupp.*, -1::BIGINT AS _w FROM partsupp JOIN repriced
        ON ps_partkey = pk AND ps_suppkey = sk""")
    con.execute(f"""UPDATE partsupp SET ps_supplycost = CAST(ps_supplycost / 2 AS
        DECIMAL(15, 2)), ps_availqty = {STOCK} FROM repriced
        WHERE ps_partkey = pk AND ps_suppkey = sk""")
    # and complaints recorded against 2 % of suppliers, or cleared where they had some
    # (Q16 leaves out the suppliers with complaints: NOT IN)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE complained AS SELECT s_suppkey AS sk,
        CASE WHEN s_comment LIKE '%Customer%Complaints%' THEN 'complaints cleared'
        ELSE s_comment || ' Customer Complaints' END AS comment FROM supplier
        ORDER BY hash(s_suppkey + {rng.randrange(1 << 30)}) LIMIT 10""")
    con.execute(f"""CREATE OR REPLACE TABLE "{input_relation('supplier')}" AS
        SELECT supplier.* REPLACE (comment AS s_comment), 1::BIGINT AS _w FROM supplier
        JOIN complained ON s_suppkey = sk
        UNION ALL SELECT supplier.*, -1::BIGINT AS _w FROM supplier JOIN complained
        ON s_suppkey = sk""")
    con.execute("UPDATE supplier SET s_comment = comment FROM complained "
                "WHERE s_suppkey = sk")
    for t in ("customer", "nation", "region", "part"):
        con.execute(f'CREATE OR REPLACE TABLE "{input_relation(t)}" AS '
                    f"SELECT *, 1::BIGINT AS _w FROM {t} WHERE false")
    return next_key + n


def test_an_input_s_reads_per_epoch_are_counted_as_the_inlined_statements_read_it(tpch):
    """`Program.reads` against the statements inlined as text: every view that is not
    computed once replaced by its query where it is read, then the input's name counted in
    what runs; and no statement reading an input runs twice."""
    _, schemas, queries = tpch
    seen = Counter()
    for n, sql in queries.items():
        prog = program(plan_view(sql, schemas, dialect="duckdb").root, f"q{n}__")
        steps = {s.name: s for s in prog.steps if isinstance(s, Step)}
        names = sorted(steps, key=len, reverse=True)
        word = re.compile(r"(?<![\w`])`?(" + "|".join(map(re.escape, names)) + r")`?(?![\w`])")

        def text(name: str, steps=steps, word=word) -> str:
            s = steps.get(name)
            if s is None or s.shared:
                return f" <{name}> "
            return "(" + word.sub(lambda m: text(m.group(1)), s.sql) + ")"

        run = [word.sub(lambda m: text(m.group(1)), s.sql) for s in steps.values()
               if s.shared]
        run += [text(s.next) + (text(s.grows) if s.grows else "") for s in prog.states]
        run.append(text(prog.out))
        for t in schemas:
            rel = input_relation(t)
            expected = sum(len(re.findall(rf"(?<![\w`]){rel}(?![\w`])", r)) for r in run)
            assert prog.reads(rel) == expected, (n, t)
            # and each statement that reads the input runs once: what reads it is
            # computed once where it is read twice (an aggregate's next state: kept, and
            # read by the output's rule)
            scans = sum(1 for s in steps.values()
                        if re.search(rf"(?<![\w`]){rel}(?![\w`])", s.sql))
            assert prog.reads(rel) == scans, (n, t, prog.reads(rel), scans)
            seen[prog.reads(rel)] += 1
    assert seen[1] and max(seen) > 1  # Q21 reads lineitem in several of its statements
