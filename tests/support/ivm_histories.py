"""Change histories of two tables (orders, customers) and views over them: what the
incremental views' properties draw, on DuckDB in the unit tier and on Spark."""

from __future__ import annotations

from hypothesis import strategies as st

SCHEMAS = {"orders": {"id": "bigint", "cust": "string", "amount": "bigint", "day": "string"},
           "customers": {"cust": "string", "region": "string"}}
VIEWS = {
    "per_customer": "SELECT cust, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, "
                    "MIN(amount) AS lo, MAX(amount) AS hi, COUNT(amount) AS valued, "
                    "COUNT(DISTINCT day) AS days FROM orders GROUP BY cust",
    "linear": "SELECT id, amount * 2 AS dbl, CASE WHEN amount > 50 THEN 'big' ELSE 'small' "
              "END AS size, upper(cust) AS who FROM orders WHERE day <> 'd0' OR day IS NULL",
    "join_then_aggregate": "SELECT c.region, SUM(o.amount) AS total, COUNT(*) AS n "
                           "FROM orders o JOIN customers c ON o.cust = c.cust "
                           "GROUP BY c.region HAVING COUNT(*) > 1",
    "global": "SELECT COUNT(*) AS n, SUM(amount) AS s, MAX(amount) AS m, AVG(amount) AS a "
              "FROM orders",
    "distinct": "SELECT DISTINCT cust, day FROM orders",
    "union_all": "SELECT cust FROM orders WHERE amount > 10 UNION ALL "
                 "SELECT cust FROM customers WHERE region IS NOT NULL",
    "view_over_a_view": "SELECT region, MAX(total) AS top, COUNT(*) AS customers FROM "
                        "(SELECT c.region, o.cust, SUM(o.amount) AS total FROM orders o "
                        "JOIN customers c ON o.cust = c.cust GROUP BY c.region, o.cust) t "
                        "GROUP BY region",
    "aggregate_then_filter": "SELECT day, SUM(amount) AS s FROM orders WHERE amount IS NOT "
                             "NULL GROUP BY day HAVING SUM(amount) > 40",
    "or_of_join_conditions": "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS s "
                             "FROM orders o, customers c WHERE (o.cust = c.cust AND "
                             "o.amount > 50) OR (o.cust = c.cust AND c.region = 'north') "
                             "GROUP BY c.region",
    "three_inputs_out_of_order": "SELECT a.id, c2.cust AS neighbour FROM orders a, "
                                 "customers c2, customers c WHERE a.cust = c.cust "
                                 "AND c2.region = c.region",
    "top_groups": "SELECT cust, SUM(amount) AS s FROM orders GROUP BY cust "
                  "ORDER BY s DESC NULLS LAST, cust LIMIT 2",
    "top_rows_with_duplicates": "SELECT cust, amount FROM orders "
                                "ORDER BY amount DESC NULLS FIRST, cust LIMIT 3",
    "in_subquery": "SELECT id, amount FROM orders WHERE cust IN "
                   "(SELECT cust FROM customers WHERE region = 'north') AND amount > 5",
    "exists_then_aggregate": "SELECT o.day, COUNT(*) AS n FROM orders o WHERE EXISTS "
                             "(SELECT * FROM customers c WHERE c.cust = o.cust "
                             "AND c.region IS NOT NULL) GROUP BY o.day",
    "above_the_mean": "SELECT id, amount FROM orders WHERE amount > "
                      "(SELECT AVG(amount) FROM orders)",
    "top_of_its_customer": "SELECT o.id, o.cust FROM orders o WHERE o.amount >= "
                           "(SELECT MAX(p.amount) FROM orders p WHERE p.cust = o.cust)",
    "left_join_rows": "SELECT o.id, o.amount, c.region FROM orders o "
                      "LEFT JOIN customers c ON o.cust = c.cust",
    "left_join_then_aggregate": "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS s, "
                                "COUNT(c.cust) AS matched FROM orders o LEFT JOIN customers c "
                                "ON o.cust = c.cust AND c.region IS NOT NULL GROUP BY c.region",
    "unmatched_orders": "SELECT o.cust, COUNT(*) AS n FROM orders o LEFT JOIN customers c "
                        "ON o.cust = c.cust WHERE c.cust IS NULL GROUP BY o.cust",
    "two_left_joins": "SELECT o.id, c.region, c2.cust AS neighbour FROM orders o "
                      "LEFT OUTER JOIN customers c ON o.cust = c.cust "
                      "LEFT JOIN customers c2 ON c2.region = c.region WHERE o.amount > 20",
    "inner_join_after_a_left_join": "SELECT o.id, c.region, d.region AS home FROM orders o "
                                    "LEFT JOIN customers c ON o.cust = c.cust AND "
                                    "c.region = 'north' JOIN customers d ON d.cust = o.cust",
    "full_join_rows": "SELECT o.id, o.cust, c.cust AS known, c.region FROM orders o "
                      "FULL JOIN customers c ON o.cust = c.cust",
    "full_join_then_aggregate": "SELECT c.region, o.day, COUNT(*) AS n, COUNT(o.id) AS ids, "
                                "SUM(o.amount) AS s FROM orders o FULL OUTER JOIN customers c "
                                "ON c.cust = o.cust WHERE o.amount IS NULL OR o.amount > 10 "
                                "GROUP BY c.region, o.day",
    "left_join_using": "SELECT cust, o.id, c.region FROM orders o "
                       "LEFT JOIN customers c USING (cust)",
    "not_in_rows": "SELECT id, amount FROM orders WHERE cust NOT IN "
                   "(SELECT cust FROM customers WHERE region = 'north')",
    "not_in_its_own_table": "SELECT day, COUNT(*) AS n FROM orders WHERE cust NOT IN "
                            "(SELECT cust FROM orders WHERE amount > 90) GROUP BY day",
    "not_in_over_a_nested_in": "SELECT id, amount FROM orders WHERE cust NOT IN (SELECT cust "
                               "FROM customers WHERE region IN (SELECT region FROM customers "
                               "WHERE cust = 'c1'))",
    "not_exists_rows": "SELECT o.id, o.amount FROM orders o WHERE NOT EXISTS "
                       "(SELECT 1 FROM customers c WHERE c.cust = o.cust "
                       "AND c.region = 'north') AND o.amount > 5",
    "not_exists_then_aggregate": "SELECT o.day, COUNT(*) AS n, SUM(o.amount) AS s FROM "
                                 "orders o WHERE NOT EXISTS (SELECT * FROM customers c "
                                 "WHERE c.cust = o.cust) AND EXISTS (SELECT * FROM orders p "
                                 "WHERE p.day = o.day AND p.id <> 0) GROUP BY o.day",
    "exists_another_customer": "SELECT o.id, o.cust FROM orders o WHERE EXISTS (SELECT * "
                               "FROM orders p WHERE p.day = o.day AND p.cust <> o.cust)",
    "q21_shape": "SELECT c.region, COUNT(*) AS n FROM orders o JOIN customers c "
                 "ON o.cust = c.cust WHERE EXISTS (SELECT * FROM orders p WHERE p.day = o.day "
                 "AND p.cust <> o.cust) AND NOT EXISTS (SELECT * FROM orders q WHERE "
                 "q.day = o.day AND o.cust <> q.cust AND q.amount > 80) GROUP BY c.region",
    "right_join_then_aggregate": "SELECT c.cust, c.region, COUNT(o.id) AS n, "
                                 "SUM(o.amount) AS s FROM orders o RIGHT JOIN customers c "
                                 "ON o.cust = c.cust AND o.amount > 10 "
                                 "WHERE o.day IS NULL OR o.day <> 'd1' GROUP BY c.cust, c.region",
    "self_join": "SELECT a.cust, COUNT(*) AS pairs FROM orders a JOIN orders b "
                 "ON a.cust = b.cust AND a.day = b.day WHERE a.id < b.id GROUP BY a.cust",
}
CUSTS = st.sampled_from(["c0", "c1", "c2", None])
ORDER_OPS = st.one_of(
    st.tuples(st.just("insert"), CUSTS, st.one_of(st.none(), st.integers(0, 99)),
              st.sampled_from(["d0", "d1", None])),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("move"), st.integers(0, 30), CUSTS),  # a key moving between groups
    st.tuples(st.just("duplicate"), st.integers(0, 30)),
    st.tuples(st.just("reinsert"), st.integers(0, 30)),  # deleted and inserted again
    st.tuples(st.just("customer"), CUSTS, st.sampled_from(["north", "south", None])),
    st.tuples(st.just("drop_customer"), st.integers(0, 5)),
)


def _apply(op: tuple, tables: dict[str, list[tuple]], changes: dict[str, list], state: dict):
    orders, customers = tables["orders"], tables["customers"]

    def insert(t: str, row: tuple) -> None:
        tables[t].append(row)
        changes[t].append((row, 1))

    def delete(t: str, i: int) -> tuple | None:
        if not tables[t]:
            return None
        row = tables[t].pop(i % len(tables[t]))
        changes[t].append((row, -1))
        return row

    kind = op[0]
    if kind == "insert":
        state["id"] += 1
        insert("orders", (state["id"], op[1], op[2], op[3]))
    elif kind == "delete":
        delete("orders", op[1])
    elif kind == "move" and orders:
        row = delete("orders", op[1])
        if row:
            insert("orders", (row[0], op[2], row[2], row[3]))
    elif kind == "duplicate" and orders:
        insert("orders", orders[op[1] % len(orders)])
    elif kind == "reinsert" and orders:
        row = delete("orders", op[1])
        if row:
            insert("orders", row)
    elif kind == "customer":
        insert("customers", (op[1], op[2]))
    elif kind == "drop_customer":
        delete("customers", op[1])
    del customers
