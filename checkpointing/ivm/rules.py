"""One rule per operator (DBSP's incremental operators): the SQL statements that turn the
changes of a node's inputs into its own changes, and its kept state into the next epoch's.

Every relation is a Z-set: the node's columns and the weight ``_w``. A node ``n`` defines
``d<n>`` (its changes this epoch). A node with state reads its previous state ``s<n>...``
and defines the next one as ``s<n>...__next``; on the first epoch the previous state is
empty, of the shape its :class:`State` says. The statements are Spark SQL (sqlglot
renders them for another engine): the plan runs wherever SQL runs, Spark in production.
"""

# ruff: noqa: S608 - SQL is this module's output: identifiers go through q(), expressions
# through sqlglot's renderer; no value from outside the query is pasted in.
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, replace

from sqlglot import exp

from checkpointing.ivm.operators import (
    WEIGHT,
    Aggregate,
    AggregateCall,
    Distinct,
    Filter,
    Join,
    Node,
    Project,
    Scan,
    TopN,
    UnionAll,
    walk,
)

W = f"`{WEIGHT}`"


@dataclass(frozen=True)
class Step:
    """Define relation ``name`` as ``sql`` (this epoch's). ``shared``: later statements read
    it more than once and its query folds in others (:func:`program`), so an engine that
    defines relations as views (Spark's temporary views inline their queries) computes it
    once instead."""

    name: str
    sql: str
    shared: bool = False


@dataclass(frozen=True)
class State:
    """A kept relation: read as ``name`` (the previous epoch's; ``empty`` on the first),
    replaced by ``name + "__next"`` once the epoch's steps ran.

    ``grows``: the relation whose rows the next state adds to this one (a join side grows
    by its input's change): its rules read it as a Z-set (weights multiplied or summed,
    never one row per value), so an engine may keep it as the earlier epochs' batches plus
    this epoch's ``grows``, a row's weight being its weights' sum, instead of rewriting it
    whole (``__next`` is that rewrite)."""

    name: str
    empty: str
    grows: str | None = None

    @property
    def next(self) -> str:
        return f"{self.name}__next"


@dataclass(frozen=True)
class Program:
    """The statements of one epoch, in order, and the states they read and write; ``out``
    names the relation of the view's changes. ``inputs`` maps each input's relation of
    changes (``in_<table>``, its columns and ``_w``) to the table."""

    steps: tuple[Step | State, ...]
    out: str

    @property
    def states(self) -> tuple[State, ...]:
        return tuple(s for s in self.steps if isinstance(s, State))

    def reads(self, relation: str) -> int:
        """How many times one epoch reads ``relation`` (an input's changes) when an engine
        defines the statements that are not :attr:`Step.shared` as views: each of those
        is inlined, its reads with it, wherever it is read. What runs is every shared
        statement (once), every state's next content and addition (kept) and ``out``
        (read by the caller). Each statement that scans an input runs once
        (:func:`_shared`), so this is the number of statements scanning it."""
        steps = {st.name: st for st in self.steps if isinstance(st, Step)}
        names = {*steps, relation}
        memo: dict[str, int] = {}

        def inlined(sql: str) -> int:
            return sum(expand(r) for r in relations_read(sql, names))

        def expand(name: str) -> int:
            if name == relation:
                return 1
            st = steps.get(name)
            if st is None or st.shared:  # a state's earlier content, or computed once
                return 0
            if name not in memo:
                memo[name] = inlined(st.sql)
            return memo[name]

        run = [inlined(st.sql) for st in steps.values() if st.shared]
        run += [expand(st.next) + (expand(st.grows) if st.grows else 0)
                for st in self.states]
        return sum(run) + expand(self.out)


#: the prefix of an input's relation of changes (:func:`input_relation`)
INPUT_PREFIX = "in_"


def input_relation(table: str) -> str:
    """The relation an executor defines with the changes of input ``table``."""
    return f"{INPUT_PREFIX}{table.replace('.', '__')}"


def program(root: Node, namespace: str = "") -> Program:
    """The statements of one epoch of the plan under ``root``; every relation it defines is
    named ``<namespace><name>``, so that views sharing an engine share no name."""
    steps: list[Step | State] = []
    for node in walk(root):
        steps.extend(_RULES[type(node)](node, namespace))  # type: ignore[operator]
    return Program(_shared(steps, d(root, namespace)), d(root, namespace))


#: A relation read more than once whose query, its unshared relations inlined, holds at
#: least this many statements is computed once (:attr:`Step.shared`).
SHARED_SIZE = 2


def _shared(steps: list[Step | State], out: str) -> tuple[Step | State, ...]:
    """``steps`` with :attr:`Step.shared` set. A rule reads a child's change more than once
    (a join's ``ΔL ⋈ R + (L + ΔL) ⋈ ΔR``, and again for its next state): inlined, each level
    of a plan doubles the statements below it, and TPC-H Q21's eight joins made a query
    Spark could not even analyse in 2 GB. Computing a relation once where it is read
    twice keeps every query linear in the plan's size.

    A relation is read by the statements that name it, and also by what runs it: a
    state's next content and addition are read when the states are kept, and ``out`` by
    the caller (an aggregate's next state is read by its output's rule and kept: inlined,
    its change, and the input's below it, would be computed twice). A statement that
    reads an input's changes counts as large: reading them again reads the upstream
    table's changed files again."""
    names = {s.name for s in steps if isinstance(s, Step)}
    refs = {s.name: relations_read(s.sql, names) for s in steps if isinstance(s, Step)}
    reads = Counter(r for read in refs.values() for r in read)
    reads.update(r for st in steps if isinstance(st, State)
                 for r in (st.next, st.grows) if r is not None)
    reads[out] += 1
    size: dict[str, int] = {}
    shared: set[str] = set()
    for st in steps:  # in order: a statement reads only earlier ones
        if not isinstance(st, Step):
            continue
        n = st.name
        size[n] = 1 + sum(size[r] for r in refs[n] if r not in shared)
        if _INPUT.search(st.sql):
            size[n] = max(size[n], SHARED_SIZE)
        if reads[n] > 1 and size[n] >= SHARED_SIZE:
            shared.add(n)
    return tuple(replace(s, shared=True) if isinstance(s, Step) and s.name in shared else s
                 for s in steps)


#: a read of an input's relation of changes (:func:`input_relation`)
_INPUT = re.compile(r"(?<![\w`])`?" + INPUT_PREFIX + r"\w+`?(?![\w`])")


def relation_pattern(names: list[str]) -> re.Pattern[str]:
    """A pattern finding each read of one of ``names`` in a statement (as a whole name,
    quoted or not); its one group is the name."""
    return re.compile(r"(?<![\w`])`?(" + "|".join(map(re.escape, names)) + r")`?(?![\w`])")


#: a whole name of word characters, quoted or not, where :func:`relation_pattern` finds one
_WORD_NAME = re.compile(r"(?<![\w`])`?(\w+)`?(?![\w`])")


def relations_read(sql: str, names: Collection[str]) -> list[str]:
    """The reads of ``names`` in ``sql``, in order: what ``relation_pattern(names)`` finds.
    Names of word characters alone (every name a plan makes, unless a view's namespace has
    others) are found by one pattern compiled once, and kept when they are among
    ``names``: an engine asks this for every statement it is given, with a set of names
    that grows by one each time, and compiling a pattern of them all each time was most of
    an epoch's own time (Python's cache of patterns holds 512)."""
    if not names:
        return []
    if all(n.isascii() and n.isidentifier() for n in names):
        return [n for n in _WORD_NAME.findall(sql) if n in names]
    # longest first: of two names where one starts the other, the whole one is read
    return relation_pattern(sorted(names, key=lambda n: (-len(n), n))).findall(sql)


def d(node: Node, ns: str = "") -> str:
    """The relation of ``node``'s changes (``ns``: the view's namespace of names)."""
    return f"{ns}d{node.id}"


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def cols(names: tuple[str, ...], prefix: str = "") -> str:
    p = f"{prefix}." if prefix else ""
    return ", ".join(f"{p}{q(n)}" for n in names)


def sql(e: exp.Expr) -> str:
    return e.sql(dialect="spark")


def _ns_eq(names: tuple[str, ...], a: str, b: str) -> str:
    """Null-safe equality of ``names`` between relations ``a`` and ``b`` (a group or a row
    whose key is NULL is still that group)."""
    return " AND ".join(f"{a}.{q(n)} IS NOT DISTINCT FROM {b}.{q(n)}" for n in names) \
        or "TRUE"


def consolidated(names: tuple[str, ...], union: str) -> str:
    """The Z-set ``union`` with equal rows' weights summed and zero weights dropped."""
    return (f"SELECT {cols(names)}, SUM({W}) AS {W} FROM ({union}) GROUP BY {cols(names)} "
            f"HAVING SUM({W}) <> 0")


# ---------------------------------------------------------------- linear operators
def _scan(n: Scan, ns: str) -> list[Step | State]:
    picked = ", ".join(f"{q(c)} AS {q(f'{n.alias}__{c}')}" for c in n.columns)
    return [Step(d(n, ns), f"SELECT {picked + ', ' if picked else ''}{W} "
                       f"FROM {input_relation(n.table)}")]


def _filter(n: Filter, ns: str) -> list[Step | State]:
    return [Step(d(n, ns), f"SELECT * FROM {d(n.child, ns)} WHERE {sql(n.predicate)}")]


def _project(n: Project, ns: str) -> list[Step | State]:
    picked = ", ".join(f"{sql(e)} AS {q(name)}" for name, e in n.outputs)
    return [Step(d(n, ns), f"SELECT {picked}, {W} FROM {d(n.child, ns)}")]


def _union(n: UnionAll, ns: str) -> list[Step | State]:
    names = n.names()
    parts = []
    for c in n.children:
        renamed = ", ".join(f"{q(a)} AS {q(b)}" for a, b in zip(c.names(), names, strict=True))
        parts.append(f"SELECT {renamed}, {W} FROM {d(c, ns)}")
    return [Step(d(n, ns), " UNION ALL ".join(parts))]


# ---------------------------------------------------------------- join
def _join(n: Join, ns: str) -> list[Step | State]:
    """Δ(L ⋈ R) = ΔL ⋈ R + (L + ΔL) ⋈ ΔR, both sides kept consolidated."""
    if n.kind != "inner":
        return _outer_join(n, ns)
    sl = State(f"{ns}s{n.id}_l", f"SELECT * FROM {d(n.left, ns)} WHERE 1 = 0",
               grows=d(n.left, ns))
    sr = State(f"{ns}s{n.id}_r", f"SELECT * FROM {d(n.right, ns)} WHERE 1 = 0",
               grows=d(n.right, ns))
    ln, rn = n.left.names(), n.right.names()

    def on(a: str, b: str) -> str:
        return " AND ".join(f"{_at(lk, a)} = {_at(rk, b)}"
                            for lk, rk in zip(n.left_keys, n.right_keys, strict=True)) \
            or "TRUE"  # a join with the one row of a global aggregate

    picked = f"{cols(ln, 'a')}, {cols(rn, 'b')}, a.{W} * b.{W} AS {W}"
    left_now = f"(SELECT * FROM {sl.name} UNION ALL SELECT * FROM {d(n.left, ns)})"
    delta = (f"SELECT {picked} FROM {d(n.left, ns)} a JOIN {sr.name} b "
             f"ON {on('a', 'b')} "
             f"UNION ALL SELECT {picked} FROM {left_now} a JOIN {d(n.right, ns)} b "
             f"ON {on('a', 'b')}")
    return [sl, sr, Step(d(n, ns), delta),
            Step(sl.next, consolidated(ln, f"SELECT * FROM {sl.name} UNION ALL "
                                            f"SELECT * FROM {d(n.left, ns)}")),
            Step(sr.next, consolidated(rn, f"SELECT * FROM {sr.name} UNION ALL "
                                            f"SELECT * FROM {d(n.right, ns)}"))]


def _outer_join(n: Join, ns: str) -> list[Step | State]:
    """Δ(L ⟕ R) = Δ(L ⋈ R) + pad(ΔL − Δ(L ⋉ R)) (:func:`_unmatched`); a FULL join adds
    the mirror image, pad(ΔR − Δ(R ⋉ L)), the right rows that lost or found their last
    match on the left."""
    sl, sr, delta, *next_states = _join(replace(n, kind="inner"), ns)
    assert isinstance(sl, State) and isinstance(sr, State) and isinstance(delta, Step)
    steps, unmatched = _unmatched(n, ns, "", (n.left, sl.name, n.left_keys),
                                  (n.right, sr.name, n.right_keys), pad_right=True)
    if n.kind == "full":
        more, mirrored = _unmatched(n, ns, "_r", (n.right, sr.name, n.right_keys),
                                    (n.left, sl.name, n.left_keys), pad_right=False)
        steps, unmatched = [*steps, *more], f"{unmatched} UNION ALL {mirrored}"
    return [sl, sr, *steps, Step(d(n, ns), f"{delta.sql} UNION ALL {unmatched}"),
            *next_states]


def _unmatched(n: Join, ns: str, tag: str, kept: tuple[Node, str, tuple[exp.Expr, ...]],
               other: tuple[Node, str, tuple[exp.Expr, ...]], pad_right: bool
               ) -> tuple[list[Step | State], str]:
    """The change of the ``kept`` side's rows that no row of the ``other`` side matches,
    padded with NULLs for the other side's columns: ΔK − Δ(K ⋉ O), where the semi-join's
    change is ΔK ⋉ (O + ΔO) + K ⋉ (keys that appeared in O) − K ⋉ (keys that vanished):
    only the keys ΔO touches are counted before and after. A NULL key matches nothing
    (``=``), so its rows stay unmatched. Each side is (node, its kept state, its keys)."""
    k_node, k_state, k_keys = kept
    o_node, o_state, o_keys = other
    kn, on_ = k_node.names(), o_node.names()
    ks = tuple(f"__k{i}" for i in range(len(o_keys)))
    other_keys = [_at(k, "r") for k in o_keys]

    def counts(rel: str) -> str:
        """Each non-NULL key of the other side in ``rel`` and its count."""
        keyed = ", ".join(f"{k} AS {q(name)}" for k, name in zip(other_keys, ks, strict=True))
        return (f"SELECT {keyed}, SUM(r.{W}) AS `_c` FROM {rel} r WHERE "
                f"{' AND '.join(f'{k} IS NOT NULL' for k in other_keys)} "
                f"GROUP BY {', '.join(other_keys)}")

    def matches(alias: str) -> str:
        return " AND ".join(f"{_at(lk, alias)} = k.{q(name)}"
                            for lk, name in zip(k_keys, ks, strict=True))

    other_now = f"(SELECT * FROM {o_state} UNION ALL SELECT * FROM {d(o_node, ns)})"
    # the other side's keys its change touched whose presence changed: +1 appeared,
    # -1 vanished
    flips = Step(f"{d(n, ns)}{tag}_flip", (
        f"SELECT {cols(ks, 'c')}, CASE WHEN COALESCE(b.`_c`, 0) > 0 THEN -1 ELSE 1 END "
        f"AS `_f` FROM ({counts(d(o_node, ns))}) c LEFT JOIN ({counts(o_state)}) b ON "
        + " AND ".join(f"c.{q(k)} = b.{q(k)}" for k in ks)
        + " WHERE (COALESCE(b.`_c`, 0) > 0) <> (COALESCE(b.`_c`, 0) + c.`_c` > 0)"))
    keys_now = Step(f"{d(n, ns)}{tag}_keys",
                    f"SELECT {cols(ks)} FROM ({counts(other_now)}) WHERE `_c` > 0")
    semi = (f"SELECT {cols(kn, 'a')}, a.{W} FROM {d(k_node, ns)} a JOIN {keys_now.name} k "
            f"ON {matches('a')} UNION ALL SELECT {cols(kn, 'a')}, a.{W} * k.`_f` AS {W} "
            f"FROM {k_state} a JOIN {flips.name} k ON {matches('a')}")
    nulls = ", ".join(f"NULL AS {q(c)}" for c in on_)
    picked = f"{cols(kn)}, {nulls}" if pad_right else f"{nulls}, {cols(kn)}"
    unmatched = (f"SELECT {picked}, {W} FROM {d(k_node, ns)} UNION ALL "
                 f"SELECT {picked}, -{W} AS {W} FROM ({semi})")
    return [flips, keys_now], unmatched


def _at(e: exp.Expr, alias: str) -> str:
    """Expression ``e`` over the columns of relation ``alias``."""
    return sql(e.copy().transform(
        lambda x: exp.column(x.name, table=alias, quoted=True)
        if isinstance(x, exp.Column) and not x.table else x))


# ---------------------------------------------------------------- distinct
def _distinct(n: Distinct, ns: str) -> list[Step | State]:
    names = n.names()
    s = State(f"{ns}s{n.id}",
              f"SELECT {cols(names)}, {W} FROM {d(n.child, ns)} WHERE 1 = 0")
    touched = f"{ns}t{n.id}"
    present = (f"(CASE WHEN COALESCE(new.{W}, 0) > 0 THEN 1 ELSE 0 END) - "
               f"(CASE WHEN COALESCE(old.{W}, 0) > 0 THEN 1 ELSE 0 END)")
    return [s,
            Step(touched, f"SELECT {cols(names)}, SUM({W}) AS {W} "
                          f"FROM {d(n.child, ns)} GROUP BY {cols(names)}"),
            Step(s.next, consolidated(names, f"SELECT * FROM {s.name} UNION ALL "
                                              f"SELECT * FROM {touched}")),
            Step(d(n, ns), f"SELECT * FROM (SELECT {cols(names, 't')}, {present} AS {W} "
                       f"FROM {touched} t LEFT JOIN {s.name} old ON "
                       f"{_ns_eq(names, 't', 'old')} LEFT JOIN {s.next} new ON "
                       f"{_ns_eq(names, 't', 'new')}) WHERE {W} <> 0")]


# ---------------------------------------------------------------- aggregate
def _aggregate(n: Aggregate, ns: str) -> list[Step | State]:
    keys = tuple(k for k, _ in n.keys)
    summed = [a for a in n.aggregates if not a.by_value]
    inputs = [f"{sql(e)} AS {q(k)}" for k, e in n.keys] + \
        [f"{sql(a.argument)} AS {q('x_' + a.name)}" for a in n.aggregates if a.argument]
    rows = f"(SELECT {', '.join([*inputs, W])} FROM {d(n.child, ns)})"
    partials = [f"SUM({W}) AS `_cnt`"]
    for a in summed:
        if a.argument is not None:
            x = q("x_" + a.name)
            partials.append(f"SUM(CASE WHEN {x} IS NOT NULL THEN {W} ELSE 0 END) AS "
                            f"{q('n_' + a.name)}")
            if a.function != "COUNT":  # COUNT(x) of any type needs its count alone
                partials.append(f"SUM({x} * {W}) AS {q('s_' + a.name)}")
    group = f" GROUP BY {cols(keys)}" if keys else ""
    first = f"{cols(keys)}, " if keys else ""
    delta_rel = f"{ns}da{n.id}"
    s = State(f"{ns}s{n.id}", f"SELECT * FROM {delta_rel} WHERE 1 = 0")
    steps: list[Step | State] = [Step(delta_rel, f"SELECT {first}{', '.join(partials)} "
                                                 f"FROM {rows}{group}"), s]
    merged = ["COALESCE(SUM(`_cnt`), 0) AS `_cnt`"]
    for a in summed:
        if a.argument is not None:
            merged.append(f"COALESCE(SUM({q('n_' + a.name)}), 0) AS {q('n_' + a.name)}")
            if a.function != "COUNT":
                merged.append(f"SUM({q('s_' + a.name)}) AS {q('s_' + a.name)}")
    having = " HAVING SUM(`_cnt`) <> 0" if keys else ""
    steps.append(Step(s.next, f"SELECT {first}{', '.join(merged)} FROM (SELECT * FROM "
                              f"{s.name} UNION ALL SELECT * FROM {delta_rel})"
                              f"{group}{having}"))
    for a in n.aggregates:
        if a.by_value:
            steps.extend(_value_state(n, a, rows, keys, ns))
    if keys:
        steps.append(Step(f"{ns}t{n.id}", f"SELECT DISTINCT {cols(keys)} FROM {delta_rel}"))
    steps.append(Step(d(n, ns), f"{_rows(n, s.name, '', -1, ns)} UNION ALL "
                            f"{_rows(n, s.next, '__next', 1, ns)}"))
    return steps


def _value_state(n: Aggregate, a: AggregateCall, rows: str, keys: tuple[str, ...],
                 ns: str) -> list[Step | State]:
    """Per group, each non-null value's count: MIN, MAX and COUNT(DISTINCT) read the values
    whose count is positive."""
    names = (*keys, "v")
    first = f"{cols(keys)}, " if keys else ""
    dv = f"{ns}dv{n.id}_{a.name}"
    s = State(f"{ns}s{n.id}_{a.name}", f"SELECT * FROM {dv} WHERE 1 = 0")
    x = q("x_" + a.name)
    return [Step(dv, f"SELECT {first}{x} AS `v`, SUM({W}) AS {W} FROM {rows} "
                     f"WHERE {x} IS NOT NULL GROUP BY {cols(names)}"),
            s, Step(s.next, consolidated(names, f"SELECT * FROM {s.name} UNION ALL "
                                                 f"SELECT * FROM {dv}"))]


def _rows(n: Aggregate, state: str, suffix: str, weight: int, ns: str) -> str:
    """The output rows of the touched groups in ``state`` (the old ones retracted with
    weight -1, the new ones added with +1). Without keys, the one row, always."""
    keys = tuple(k for k, _ in n.keys)
    joins, values = [], []
    for a in n.aggregates:
        if a.by_value:
            vs = f"{ns}s{n.id}_{a.name}{suffix}"
            fn = {"MIN": "MIN(`v`)", "MAX": "MAX(`v`)", "COUNT_DISTINCT": "COUNT(`v`)"}[
                a.function]
            first = f"{cols(keys)}, " if keys else ""
            group = f" GROUP BY {cols(keys)}" if keys else ""
            m = q("m_" + a.name)
            joins.append(f"LEFT JOIN (SELECT {first}{fn} AS `v` FROM {vs} WHERE {W} > 0"
                         f"{group}) {m} ON {_ns_eq(keys, 'r', m)}")
            v = f"{q('m_' + a.name)}.`v`"
            values.append(f"COALESCE({v}, 0)" if a.function == "COUNT_DISTINCT" else v)
        else:
            values.append(_summed_value(a))
    outputs = [*(f"r.{q(k)}" for k in keys),
               *(f"{v} AS {q(a.name)}" for v, a in zip(values, n.aggregates, strict=True))]
    touched = f"JOIN {ns}t{n.id} t ON {_ns_eq(keys, 'r', 't')} " if keys else ""
    return (f"SELECT {', '.join([*outputs, f'{weight} AS {W}'])} FROM {state} r "
            f"{touched}{' '.join(joins)}")


def _summed_value(a: AggregateCall) -> str:
    n, s = f"r.{q('n_' + a.name)}", f"r.{q('s_' + a.name)}"
    return {"COUNT_STAR": "r.`_cnt`", "COUNT": n,
            "SUM": f"CASE WHEN {n} > 0 THEN {s} END",
            "AVG": f"CASE WHEN {n} > 0 THEN {s} / {n} END"}[a.function]


# ---------------------------------------------------------------- top-N
def _top_n(n: TopN, ns: str) -> list[Step | State]:
    """The first ``limit`` rows of the kept rows after the change, minus those before it
    (a row of weight w is w rows; ties beyond ORDER BY are broken by every column)."""
    names = n.names()
    s = State(f"{ns}s{n.id}", f"SELECT * FROM {d(n.child, ns)} WHERE 1 = 0")
    order = ", ".join([*(sql(o) for o in n.order), *(q(c) for c in names)])

    def first(rel: str, sign: str) -> str:
        run = (f"SUM({W}) OVER (ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND "
               "CURRENT ROW)")
        return (f"SELECT {cols(names)}, {sign}LEAST({W}, {n.limit} - (`_run` - {W})) AS {W} "
                f"FROM (SELECT {cols(names)}, {W}, {run} AS `_run` FROM {rel}) "
                f"WHERE `_run` - {W} < {n.limit}")

    return [s, Step(s.next, consolidated(names, f"SELECT * FROM {s.name} UNION ALL "
                                                 f"SELECT * FROM {d(n.child, ns)}")),
            Step(d(n, ns), f"{first(s.next, '')} UNION ALL {first(s.name, '-')}")]


_RULES = {Scan: _scan, Filter: _filter, Project: _project, UnionAll: _union, Join: _join,
          Distinct: _distinct, Aggregate: _aggregate, TopN: _top_n}
