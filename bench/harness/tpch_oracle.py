"""An independent computation of tpch_daily's outputs: DuckDB runs TPC-H Q1, Q5's joins
and revenue per customer directly on the generated Parquet (tpchgen-cli's own files, not
the landed ones), restricted to the orders placed before the input end minus the deleted
orders. No code of the pipeline is used."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

Q1_SHIPDATE_MAX = "1998-09-02"


def _connect(generated: Path, until: str, deleted: list[int]):  # noqa: ANN202
    import duckdb

    con = duckdb.connect()
    for t in ("orders", "lineitem", "customer", "supplier", "nation", "region"):
        con.execute(f"CREATE VIEW {t}_all AS SELECT * FROM read_parquet('{generated}/{t}.parquet')")
    con.execute("CREATE TABLE deleted(k BIGINT)")
    if deleted:
        con.executemany("INSERT INTO deleted VALUES (?)", [(k,) for k in deleted])
    con.execute(f"""CREATE VIEW o AS SELECT * FROM orders_all
                    WHERE o_orderdate < DATE '{until}'
                      AND o_orderkey NOT IN (SELECT k FROM deleted)""")
    con.execute("CREATE VIEW l AS SELECT l.* FROM lineitem_all l JOIN o ON l_orderkey = o_orderkey")
    return con


def q1(generated: Path, until: str, deleted: list[int]) -> list[tuple]:
    """(returnflag, linestatus, sum_qty, sum_base_price, sum_disc_price, sum_charge,
    count_order) sorted: TPC-H Q1 over the landed, not deleted line items."""
    con = _connect(generated, until, deleted)
    return con.execute(f"""
        SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice),
               sum(l_extendedprice * (1 - l_discount)),
               sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)), count(*)
        FROM l WHERE l_shipdate <= DATE '{Q1_SHIPDATE_MAX}'
        GROUP BY 1, 2 ORDER BY 1, 2""").fetchall()


def q5(generated: Path, until: str, deleted: list[int]) -> list[tuple]:
    """(region, nation, order date, revenue) sorted: Q5's joins (customer and supplier of
    the same nation), every region and day."""
    con = _connect(generated, until, deleted)
    return con.execute("""
        SELECT r_name, n_name, o_orderdate, sum(l_extendedprice * (1 - l_discount))
        FROM o JOIN l ON l_orderkey = o_orderkey
             JOIN customer_all ON c_custkey = o_custkey
             JOIN supplier_all ON s_suppkey = l_suppkey AND s_nationkey = c_nationkey
             JOIN nation_all ON n_nationkey = s_nationkey
             JOIN region_all ON r_regionkey = n_regionkey
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""").fetchall()


def top_customers(generated: Path, until: str, deleted: list[int], n: int) -> list[tuple]:
    """(custkey, name, revenue) of the ``n`` customers with the most revenue."""
    con = _connect(generated, until, deleted)
    return con.execute(f"""
        SELECT c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
        FROM o JOIN l ON l_orderkey = o_orderkey JOIN customer_all ON c_custkey = o_custkey
        GROUP BY 1, 2 ORDER BY revenue DESC, c_custkey LIMIT {n}""").fetchall()


def as_decimal(value: object, places: int) -> Decimal:
    return Decimal(str(value)).quantize(Decimal(1).scaleb(-places))


def check_published(c: Any, generated: Path, until: str, deleted: list[int]) -> None:
    """Every output ``c`` (tpch_daily's coordinator) published equals DuckDB's over the
    orders before ``until`` that ``deleted`` does not name."""
    from bench.harness.oracle import published
    from spark_jobs.tpch import jobs

    pricing = published(c, "tpch_q1_pricing").sort_values(["l_returnflag", "l_linestatus"])
    got = [(r.l_returnflag, r.l_linestatus, r.sum_qty, r.sum_base_price, r.sum_disc_price,
            r.sum_charge, r.count_order) for r in pricing.itertuples()]
    want = q1(generated, until, deleted)
    assert [tuple(map(str, g)) for g in got] == [tuple(map(str, w)) for w in want]
    revenue = published(c, "tpch_q5_revenue")
    got5 = sorted((r.r_name, r.n_name, str(r.o_orderdate), str(r.revenue))
                  for r in revenue.itertuples())
    want5 = [(a, b, str(d), str(v)) for a, b, d, v in q5(generated, until, deleted)]
    assert got5 == sorted(want5)
    top = published(c, "tpch_top_customers").sort_values(["revenue", "c_custkey"],
                                                          ascending=[False, True])
    assert [(r.c_custkey, r.c_name, str(r.revenue)) for r in top.itertuples()] == \
        [(k, n, str(v)) for k, n, v in top_customers(generated, until, deleted, jobs.TOP_N)]
