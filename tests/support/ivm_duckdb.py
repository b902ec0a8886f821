"""An :class:`~checkpointing.ivm.maintain.Engine` on DuckDB: the plan's Spark SQL rendered
in DuckDB's dialect by sqlglot, each relation a table of one in-memory database. The
planner's tests run its rules here, without a JVM; jobs run them on Spark."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any

import sqlglot

from checkpointing.ivm.deferred import Deferred
from checkpointing.ivm.rules import State


class DuckDBEngine:
    """Every relation a table of the database. As the Spark engine does, a statement that
    is not shared is deferred (:class:`~checkpointing.ivm.deferred.Deferred`) and runs
    folded into the first statement that reads it and runs: the rules must give the same
    result whichever statements an engine defers."""

    def __init__(self, con: Any):
        self.con = con
        self.deferred = Deferred()

    def exists(self, name: str) -> bool:
        return bool(self.con.execute("SELECT count(*) FROM duckdb_tables() "
                                     "WHERE table_name = ?", [name]).fetchone()[0])

    def define(self, name: str, sql: str, once: bool = False) -> None:
        if not once:
            self.deferred.add(name, sql)
            return
        self._create(name, sql)

    def _create(self, name: str, sql: str) -> None:
        self.con.execute(f'CREATE OR REPLACE TABLE "{name}" AS '
                         f"{in_duckdb(self.deferred.fused(sql))}")

    def keep(self, states: tuple[State, ...]) -> None:
        # The states are tables replaced here, and a caller reads the view's change after:
        # what was deferred runs first, over the states it was defined over. Every state
        # is rewritten whole (its rows consolidated): the rules must give the same result
        # whether an engine keeps batches or not.
        for name in list(self.deferred.statements):  # in order: each reads earlier ones
            self._create(name, self.deferred.pop(name))
        self.con.execute("BEGIN")
        for s in states:
            self.con.execute(f'DROP TABLE IF EXISTS "{s.name}"')
            self.con.execute(f'ALTER TABLE "{s.next}" RENAME TO "{s.name}"')
        self.con.execute("COMMIT")

    def weighted(self, name: str) -> Counter:
        """Relation ``name`` (a Z-set) as row -> summed weight."""
        cur = self.con.execute(f'SELECT * FROM "{name}"')
        cols = [c[0] for c in cur.description]
        w = cols.index("_w")
        out: Counter = Counter()
        for row in cur.fetchall():
            out[tuple(_norm(v) for i, v in enumerate(row) if i != w)] += row[w]
        return out


def connect() -> Any:
    """An in-memory database on one thread. The planner's tests run thousands of statements
    over a few rows each (and TPC-H at scale factor 0.05): DuckDB's threads then cost more
    than they give, and the suite's workers share two cores (the histories' property
    spent 33 CPU-s for 6 drawn histories on two threads, 25 on one)."""
    import duckdb

    return duckdb.connect(config={"threads": 1})


@lru_cache(maxsize=4096)
def in_duckdb(sql: str) -> str:
    """``sql`` (Spark's dialect) in DuckDB's: a plan's statements are the same every epoch
    and every drawn history, and writing them is most of a property's time otherwise."""
    return sqlglot.transpile(sql, read="spark", write="duckdb")[0]


def _norm(v: Any) -> Any:
    """Values compared across two computations of the same figure: floats to 6 places,
    decimals and integers as floats when fractional."""
    from decimal import Decimal

    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, float):
        return round(v, 6)
    return v
