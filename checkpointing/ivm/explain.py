"""A view's plan in words, operator by operator: what each keeps as state and why a part
falls back (``ckpt views explain``)."""

from __future__ import annotations

from checkpointing.ivm.operators import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Node,
    Project,
    Scan,
    TopN,
    UnionAll,
    ViewPlan,
    children,
)


def explain(plan: ViewPlan) -> str:
    head = [f"view over {', '.join(plan.inputs) or 'no input'}: "
            f"{', '.join(plan.columns)}"]
    if plan.root is None:
        return "\n".join([*head, f"full recompute at the pinned versions: {plan.fallback}"])
    key = f"key ({', '.join(plan.key)})" if plan.key else "no key: rows by their content"
    return "\n".join([*head, f"incremental; {key}", *_lines(plan.root, 0)])


def _lines(node: Node, depth: int) -> list[str]:
    out = ["  " * depth + f"{type(node).__name__} #{node.id}: {_what(node)}"]
    for child in children(node):
        out.extend(_lines(child, depth + 1))
    return out


def _what(node: Node) -> str:
    if isinstance(node, Scan):
        return f"changes of {node.table} as {node.alias} ({', '.join(node.columns)})"
    if isinstance(node, Filter):
        return f"WHERE {node.predicate.sql('spark')} (linear, no state)"
    if isinstance(node, Project):
        return f"{len(node.outputs)} column(s) (linear, no state)"
    if isinstance(node, UnionAll):
        return f"UNION ALL of {len(node.children)} (linear, no state)"
    if isinstance(node, Join):
        on = " AND ".join(f"{a.sql('spark')} = {b.sql('spark')}"
                          for a, b in zip(node.left_keys, node.right_keys, strict=True))
        if node.kind == "left":
            return (f"left join ON {on}; keeps both sides' rows (a left row without a "
                    "match once, with NULLs)")
        if node.kind == "full":
            return (f"full join ON {on}; keeps both sides' rows (a row of either side "
                    "without a match once, with NULLs)")
        return f"inner join ON {on}; keeps both sides' rows"
    if isinstance(node, Aggregate):
        calls = ", ".join(f"{a.function}" for a in node.aggregates)
        keys = f"GROUP BY {len(node.keys)} key(s)" if node.keys else "one global group"
        values = [a.function for a in node.aggregates if a.by_value]
        kept = "per group: row count and sums" + (
            f"; per-value counts for {', '.join(values)}" if values else "")
        return f"{keys}: {calls}; keeps {kept}"
    if isinstance(node, Distinct):
        return "DISTINCT; keeps each row's count"
    if isinstance(node, TopN):
        order = ", ".join(o.sql("spark") for o in node.order)
        return f"ORDER BY {order} LIMIT {node.limit}; keeps its input's rows"
    raise TypeError(type(node))
