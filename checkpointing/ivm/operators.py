"""The operators of an incremental view's plan: a tree whose every node maps the changes of
its inputs to its own changes (DBSP's Z-sets: rows with an integer weight, +1 an added row,
-1 a retracted one), one rule per operator (:mod:`checkpointing.ivm.rules`).

Expressions are sqlglot expressions over the node's input columns, named so that no two
inputs of a join share one (``<alias>__<column>`` for a table's columns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp

#: the weight column of every change relation
WEIGHT = "_w"
#: a join's kind: inner, left outer, full outer
JoinKind = Literal["inner", "left", "full"]


@dataclass(frozen=True)
class Scan:
    """The changes of a named input (a table input, an earlier view): its ``columns`` as
    ``<alias>__<column>``."""

    id: int
    table: str
    alias: str
    columns: tuple[str, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(f"{self.alias}__{c}" for c in self.columns)


@dataclass(frozen=True)
class Filter:
    """Rows whose ``predicate`` holds: linear, no state."""

    id: int
    child: Node
    predicate: exp.Expr

    def names(self) -> tuple[str, ...]:
        return self.child.names()


@dataclass(frozen=True)
class Project:
    """Named expressions of each row (deterministic ones only): linear, no state."""

    id: int
    child: Node
    outputs: tuple[tuple[str, exp.Expr], ...]

    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.outputs)


@dataclass(frozen=True)
class UnionAll:
    """Every child's rows, by position under the first child's names: linear."""

    id: int
    children: tuple[Node, ...]

    def names(self) -> tuple[str, ...]:
        return self.children[0].names()


@dataclass(frozen=True)
class Join:
    """An equi-join. Its state is each side's rows (consolidated weights), so that
    Δ(L ⋈ R) = ΔL ⋈ R + (L + ΔL) ⋈ ΔR.

    ``kind`` "left": a left outer join, which also has each left row whose key no right
    row has, once, with NULL for every right column. Those are the left rows minus their
    semi-join with the right side's keys; the semi-join changes with the left rows'
    changes and with the keys that appear or vanish on the right (a key's count going
    from zero to positive or back), so only the changed keys' counts are compared, never
    the whole right side's. "full": the same for the right side's rows too. Its state is
    the inner join's."""

    id: int
    left: Node
    right: Node
    left_keys: tuple[exp.Expr, ...]
    right_keys: tuple[exp.Expr, ...]
    kind: JoinKind = "inner"

    def names(self) -> tuple[str, ...]:
        return self.left.names() + self.right.names()


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY ``keys`` with ``aggregates``. Its state is per group: the row count and,
    per aggregate, the count of non-null arguments and their weighted sum (COUNT, SUM,
    AVG); MIN, MAX and COUNT(DISTINCT) keep per group each value's count instead. A group
    whose figures changed retracts its old row and adds its new one. Without keys there is
    one group, whose row exists even over no rows (SQL's global aggregate)."""

    id: int
    child: Node
    keys: tuple[tuple[str, exp.Expr], ...]
    aggregates: tuple[AggregateCall, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.keys) + tuple(a.name for a in self.aggregates)


@dataclass(frozen=True)
class AggregateCall:
    """One aggregate: ``function`` in COUNT_STAR, COUNT, SUM, AVG, MIN, MAX,
    COUNT_DISTINCT over ``argument``."""

    name: str
    function: str
    argument: exp.Expr | None

    @property
    def by_value(self) -> bool:
        """Kept as per-value counts (it cannot be un-merged from a running figure)."""
        return self.function in ("MIN", "MAX", "COUNT_DISTINCT")


@dataclass(frozen=True)
class Distinct:
    """Each row once: its state is every row's count; a row is added when its count
    becomes positive and retracted when it drops to zero."""

    id: int
    child: Node

    def names(self) -> tuple[str, ...]:
        return self.child.names()


@dataclass(frozen=True)
class TopN:
    """ORDER BY ... LIMIT over the maintained rows: not linear (a change can move rows in
    and out of the first ``limit``), so it keeps its input's rows and compares the first
    ``limit`` of the rows before and after the change. ``order``: sqlglot ``Ordered``
    expressions over its input's columns."""

    id: int
    child: Node
    order: tuple[exp.Expr, ...]
    limit: int

    def names(self) -> tuple[str, ...]:
        return self.child.names()


Node = Scan | Filter | Project | UnionAll | Join | Aggregate | Distinct | TopN


@dataclass(frozen=True)
class ViewPlan:
    """What the planner made of a view's query: an incremental ``root``, or, when some part
    of the query cannot be maintained from changes, ``fallback`` (one line: why) and a full
    recompute at the pinned versions. ``inputs``: the named inputs it reads; ``columns``:
    the view's columns in order; ``key``: the columns that identify a row of the view
    (the GROUP BY columns), empty when rows are identified by their whole content."""

    sql: str
    inputs: tuple[str, ...]
    columns: tuple[str, ...]
    root: Node | None = None
    fallback: str | None = None
    key: tuple[str, ...] = field(default=())

    @property
    def incremental(self) -> bool:
        return self.root is not None


def walk(node: Node) -> list[Node]:
    """The nodes under ``node``, children before their parent."""
    out: list[Node] = []
    for child in children(node):
        out.extend(walk(child))
    out.append(node)
    return out


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Scan):
        return ()
    if isinstance(node, Join):
        return (node.left, node.right)
    if isinstance(node, UnionAll):
        return node.children
    return (node.child,)
