"""The planner reads a view's SQL with sqlglot: what it maintains, what makes it fall back
to a full recompute (each reason one line, each exercised here), what it refuses as a wrong
query, and the plan in words."""

from __future__ import annotations

import pytest

from checkpointing.ivm.explain import explain
from checkpointing.ivm.operators import Aggregate, Filter, Join, walk
from checkpointing.ivm.planner import ViewQueryError, plan_view

SCHEMAS = {"orders": {"id": "bigint", "cust": "string", "amount": "bigint", "day": "string"},
           "customers": {"cust": "string", "region": "string"}}

FALLBACKS = {
    "SELECT cust FROM orders ORDER BY cust LIMIT 3 OFFSET 2": "OFFSET",
    "SELECT cust FROM orders ORDER BY amount DESC LIMIT 3": "does not select",
    "SELECT cust, SUM(amount) OVER (PARTITION BY day) AS s FROM orders": "window function",
    "SELECT id, rand() AS r FROM orders": "not deterministic",
    "SELECT id, my_udf(amount) AS u FROM orders": "my_udf() is unknown",
    "SELECT id FROM orders o WHERE NOT EXISTS (SELECT 1 FROM customers c "
    "WHERE c.cust < o.cust)": "subquery in an expression",
    "SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c WHERE c.cust <> o.cust)":
        "subquery in an expression",
    "SELECT id FROM orders o WHERE cust NOT IN (SELECT c.cust FROM customers c "
    "WHERE c.region = o.day)": "NOT IN over a correlated",
    "SELECT id, (SELECT MAX(amount) FROM orders) AS top FROM orders":
        "subquery in an expression",
    "SELECT o.id, c.region FROM orders o JOIN customers d ON d.cust = o.cust "
    "RIGHT JOIN customers c ON o.cust = c.cust": "RIGHT JOIN",
    "SELECT o.id, c.region FROM orders o FULL OUTER JOIN customers c ON o.cust = c.cust "
    "AND c.region = 'north'": "a FULL JOIN's ON",
    "SELECT o.id, c.region FROM orders o FULL JOIN customers c ON o.cust = c.cust "
    "JOIN customers d ON d.cust = o.cust": "a FULL JOIN beside other joins",
    "SELECT o.id, c.region FROM orders o LEFT JOIN customers c ON o.cust = c.cust "
    "JOIN customers d ON d.region = c.region": "an inner join whose ON names a LEFT JOIN's",
    "SELECT o.id, c.region FROM orders o LEFT JOIN customers c ON o.cust = c.cust "
    "AND o.amount > 5": "a LEFT JOIN's ON",
    "SELECT o.id, c.region FROM orders o LEFT JOIN customers c ON o.cust < c.cust":
        "a LEFT JOIN's ON",
    "SELECT o.id, c.region FROM orders o CROSS JOIN customers c": "cross join",
    "SELECT o.id, c.region FROM orders o JOIN customers c ON o.cust < c.cust": "cross join",
    "SELECT cust, STDDEV(amount) AS s FROM orders GROUP BY cust": "STDDEV",
    "SELECT cust, SUM(DISTINCT amount) AS s FROM orders GROUP BY cust": "SUM(DISTINCT",
    "SELECT cust FROM orders INTERSECT SELECT cust FROM customers": "INTERSECT",
}


@pytest.mark.parametrize("sql", list(FALLBACKS))
def test_each_fallback_is_a_full_recompute_with_its_reason_in_one_line(sql):
    plan = plan_view(sql, SCHEMAS)
    assert not plan.incremental
    assert FALLBACKS[sql] in plan.fallback and "\n" not in plan.fallback
    assert explain(plan).splitlines()[-1].startswith("full recompute at the pinned versions")


@pytest.mark.parametrize(("sql", "message"), [
    ("SELEC cust FROM orders", "does not parse"),
    ("SELECT nope FROM orders", "does not fit its inputs"),
    ("SELECT cust FROM nowhere", "does not fit its inputs"),
    ("SELECT cust, amount, COUNT(*) AS n FROM orders GROUP BY cust",
     "'amount' is neither grouped nor aggregated"),
    ("INSERT INTO orders VALUES (1, 'a', 2, 'd')", "is a query"),
])
def test_a_wrong_query_is_refused_in_one_line(sql, message):
    with pytest.raises(ViewQueryError, match=message) as refused:
        plan_view(sql, SCHEMAS)
    assert "\n" not in str(refused.value)


def test_filters_go_to_the_input_they_name_and_equalities_become_join_keys():
    plan = plan_view("SELECT c.region, SUM(o.amount) AS total FROM orders o, customers c "
                     "WHERE o.cust = c.cust AND o.day = 'd1' AND c.region <> 'x' "
                     "GROUP BY c.region", SCHEMAS)
    assert plan.incremental and plan.key == ("region",)
    nodes = walk(plan.root)
    join = next(n for n in nodes if isinstance(n, Join))
    assert [k.sql() for k in join.left_keys] == ['"o__cust"']
    assert type(join.left).__name__ == "Filter" and type(join.right).__name__ == "Filter"
    agg = next(n for n in nodes if isinstance(n, Aggregate))
    assert [a.function for a in agg.aggregates] == ["SUM"]
    text = explain(plan)
    assert "inner join ON" in text and "keeps both sides' rows" in text
    assert "incremental; key (region)" in text


def test_the_key_is_the_group_by_columns_when_the_view_selects_them():
    assert plan_view("SELECT cust, day, COUNT(*) AS n FROM orders GROUP BY cust, day",
                     SCHEMAS).key == ("cust", "day")
    assert plan_view("SELECT COUNT(*) AS n FROM orders GROUP BY cust", SCHEMAS).key == ()
    assert plan_view("SELECT id, amount FROM orders", SCHEMAS).key == ()


def test_ckpt_views_explain_reads_the_query_and_a_delta_table_s_schema(tmp_path, capsys):
    import pandas as pd
    from deltalake import write_deltalake

    from checkpointing.ckpt import main

    write_deltalake(str(tmp_path / "orders"), pd.DataFrame(
        {"id": [1], "cust": ["a"], "amount": [3], "day": ["d1"]}))
    query = tmp_path / "view.sql"
    query.write_text("SELECT o.cust, COUNT(*) AS n, MAX(o.amount) AS top FROM orders o "
                     "JOIN customers c ON o.cust = c.cust GROUP BY o.cust")
    assert main(["views", "explain", "--sql-file", str(query),
                 "--table", f"orders=file://{tmp_path}/orders",
                 "--input", "customers=cust:string,region:string"]) == 0
    text = capsys.readouterr().out
    assert "incremental; key (cust)" in text
    assert "per-value counts for MAX" in text and "inner join ON" in text
    assert main(["views", "explain", "--sql", "SELECT cust FROM orders ORDER BY cust LIMIT 1",
                 "--table", f"orders=file://{tmp_path}/orders"]) == 0
    assert "ORDER BY `cust` LIMIT 1" in capsys.readouterr().out
    assert main(["views", "explain", "--sql", "SELECT x FROM orders",
                 "--input", "orders=cust"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ckpt: error: --input 'orders=cust' is not NAME=COLUMN:TYPE")


def test_the_guide_s_explain_block_prints_what_it_shows(capsys):
    """docs/guides/views.md: its ``ckpt views explain`` block, run as written, prints the
    text block that follows it."""
    import re
    import shlex
    from pathlib import Path

    from checkpointing.ckpt import main

    page = (Path(__file__).resolve().parents[2] / "docs/guides/views.md").read_text()
    command, shown = re.search(r"```bash\n(ckpt views explain.*?)```\n\n```text\n(.*?)```",
                               page, re.S).groups()
    args = shlex.split(command.replace("\\\n", " "))
    assert args[0] == "ckpt"
    assert main(args[1:]) == 0
    assert capsys.readouterr().out == shown


def test_a_left_join_keeps_its_right_side_s_conditions_apart_from_where():
    """ON's conditions on the right side filter it before the join (a left row then has
    no match, and is kept with NULLs); WHERE's filter after it, so ``WHERE c.cust IS NULL``
    keeps the unmatched rows."""
    plan = plan_view("SELECT o.id, c.region FROM orders o LEFT JOIN customers c "
                     "ON o.cust = c.cust AND c.region = 'north' WHERE c.cust IS NULL",
                     SCHEMAS)
    assert plan.incremental, plan.fallback
    nodes = walk(plan.root)
    (lj,) = [n for n in nodes if isinstance(n, Join) and n.kind == "left"]
    assert isinstance(lj.right, Filter) and "north" in lj.right.predicate.sql()
    above = [n for n in nodes if isinstance(n, Filter) and n.id > lj.id]
    assert len(above) == 1 and "IS NULL" in above[0].predicate.sql().upper()
    assert "left join ON" in explain(plan)
