"""From a view's SQL to its incremental plan (:mod:`checkpointing.ivm.operators`), with a
real SQL parser: sqlglot reads the query (Spark's dialect by default), qualifies every
column against the inputs' schemas, and the planner maps each clause to an operator. What
cannot be maintained from changes alone makes the whole view a full recompute, with the
reason in one line (:class:`ViewPlan.fallback`); a query that is wrong (an unknown table or
column, a column neither grouped nor aggregated) is refused with :class:`ViewQueryError`.

The planner needs no JVM: it reads the query and the schemas, nothing else."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from checkpointing.ivm.operators import (
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
    ViewPlan,
)


class ViewQueryError(ValueError):
    """The view's query is not valid over its inputs (one line)."""


class _Fallback(Exception):  # noqa: N818 - a reason, not an error: the view is recomputed
    """Some part of the query is not maintained incrementally; the message says which."""


#: functions whose value is not a function of the row: a recompute differs from a change
_NON_DETERMINISTIC = tuple(getattr(exp, n) for n in (
    "Rand", "Randn", "Uuid", "CurrentTimestamp", "CurrentDate", "CurrentTime",
    "CurrentTimestampLTZ", "UnixTimestamp") if hasattr(exp, n))
#: aggregates with an incremental rule, by sqlglot class
_AGGREGATES = {exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG", exp.Min: "MIN",
               exp.Max: "MAX"}


def plan_view(sql: str, schemas: Mapping[str, object], dialect: str = "spark"
              ) -> ViewPlan:
    """The incremental plan of ``sql`` over inputs named in ``schemas`` (name -> column ->
    SQL type), or its fallback to a full recompute with the reason."""
    tree = parse_query(sql, dialect)
    from sqlglot.optimizer.qualify import qualify

    try:
        tree = qualify(tree, schema=dict(schemas), dialect=dialect, validate_qualify_columns=True,
                       quote_identifiers=False)
    except SqlglotError as exc:
        raise ViewQueryError(f"the view's query does not fit its inputs: {_first(exc)}"
                             ) from None
    columns = tuple(s.alias_or_name for s in tree.selects)
    inlined = _inline_ctes(tree)
    inputs = tuple(sorted({t.name for t in inlined.find_all(exp.Table)}))
    builder = _Builder()
    try:
        root, key = builder.query(inlined)
    except _Fallback as why:
        return ViewPlan(sql, inputs, columns, fallback=str(why))
    return ViewPlan(sql, inputs, columns, root=root, key=key)


def parse_query(sql: str, dialect: str = "spark") -> exp.Query:
    """``sql`` read as one query; :class:`ViewQueryError` in one line when it does not
    parse or is not a query."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except ParseError as exc:
        raise ViewQueryError(f"the view's query does not parse: {_first(exc)}") from None
    if not isinstance(tree, exp.Query):
        raise ViewQueryError("a view is a query (SELECT ...), not "
                             f"{tree.key.upper()}")
    return tree


def query_tables(sql: str, dialect: str = "spark") -> set[str]:
    """The inputs ``sql`` reads by name (its CTEs' names left out)."""
    tree = parse_query(sql, dialect)
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table) if t.name not in ctes}


def _first(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


@dataclass
class _Builder:
    next_id: int = 0
    notes: list[str] = field(default_factory=list)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def query(self, q: exp.Expr) -> tuple[Node, tuple[str, ...]]:
        if isinstance(q, exp.Union):
            if q.args.get("distinct"):
                node: Node = Distinct(self._id(), self._union(q))
                return node, ()
            return self._union(q), ()
        if isinstance(q, exp.Intersect | exp.Except):
            raise _Fallback(f"{q.key.upper()} is not maintained incrementally yet")
        if isinstance(q, exp.Subquery):
            return self.query(q.this)
        if not isinstance(q, exp.Select):
            raise _Fallback(f"a {q.key.upper()} query is not maintained incrementally")
        return self._select(q)

    def _union(self, q: exp.Union) -> Node:
        sides: list[Node] = []
        for side in (q.this, q.expression):
            node, _ = self.query(side)
            sides.extend(node.children if isinstance(node, UnionAll) else (node,))
        return UnionAll(self._id(), tuple(sides))

    def _select(self, q: exp.Select) -> tuple[Node, tuple[str, ...]]:
        q = self._semi_joins(self._scalars(self._not_ins(q)))
        _refuse_unmaintainable(q)
        node = self._from(q)
        aggregated = bool(q.args.get("group")) or any(
            _aggregate_calls(e) for e in [*q.expressions, q.args.get("having")] if e)
        if aggregated:
            node, outputs, key = self._aggregate(q, node)
        else:
            if q.args.get("having"):
                raise ViewQueryError("HAVING without GROUP BY or an aggregate")
            outputs = tuple((s.alias_or_name, _renamed(_unaliased(s)))
                            for s in q.expressions)
            key = ()
        node = Project(self._id(), node, outputs)
        if q.args.get("distinct"):
            node = Distinct(self._id(), node)
            key = node.names()
        if q.args.get("limit"):
            node = TopN(self._id(), node, _order(q, node.names()), _limit(q))
        return node, key

    # scalar subqueries: a join with the subquery's figure per correlation key
    def _scalars(self, q: exp.Select) -> exp.Select:
        """A scalar subquery in a WHERE conjunct, ``x > (SELECT agg(...) FROM b WHERE
        b.k = a.k ...)``, as the join with ``(SELECT b.k, agg(...) FROM b ... GROUP BY
        b.k)`` on ``a.k`` (without correlation: the one row of a global aggregate, joined
        to every row). A row without a match would compare with NULL and be dropped, as
        the join drops it; COUNT, 0 and not NULL over no row, is not rewritten when
        correlated. In HAVING (with GROUP BY), an uncorrelated one joins before the
        grouping (one row: no group changes) and its figure is grouped by as well."""
        q = q.copy()
        derived: list[exp.Expr] = []
        for clause in ("where", "having"):
            node = q.args.get(clause)
            if node is None or (clause == "having" and not q.args.get("group")):
                continue
            for sub in list(node.find_all(exp.Subquery)):
                if isinstance(sub.parent, exp.In | exp.Exists) or not isinstance(
                        sub.this, exp.Select) or sub.parent_select is not q:
                    continue  # not a scalar, or one of a nested subquery's own
                alias = f"__scalar{self.next_id}_{len(derived)}"
                found = _scalar(sub.this, alias, correlated_ok=clause == "where")
                if found is None:
                    continue
                source, condition = found
                derived.append(source)
                sub.replace(exp.column("__v", alias))
                if condition is not None:
                    where = q.args.get("where")
                    q.set("where", exp.Where(this=_and(
                        [*(_conjuncts(where.this) if where else []), condition])))
                if clause == "having":
                    q.args["group"].append("expressions", exp.column("__v", alias))
        for source in derived:
            q.append("joins", exp.Join(this=source))
        return q

    # NOT IN: what it keeps, as three anti-joins, which the rules below maintain
    def _not_ins(self, q: exp.Select) -> exp.Select:
        """``x NOT IN (SELECT k FROM s WHERE p)`` among WHERE's conjuncts, uncorrelated, as
        the three conditions that keep exactly its rows under SQL's NULLs, each a NOT
        EXISTS correlated by an equality (an anti-join, maintained from the keys whose
        presence changed):

        - no ``k`` equals ``x``;
        - no ``k`` is NULL (one NULL makes NOT IN keep no row): the subquery's rows with a
          NULL ``k``, keyed TRUE, against every outer row, keyed TRUE;
        - ``x`` is not NULL unless the subquery has no row (``NULL NOT IN (<empty>)`` is
          true): its rows keyed TRUE against the outer rows keyed ``x IS NULL``.

        Each changes only when its keys appear or vanish, so a change of the subquery's
        rows does not re-read the outer rows. The subquery's relation gets a name of its
        own, so that a NOT IN over the outer query's own table is not correlated by
        accident."""
        where = q.args.get("where")
        if where is None:
            return q
        out: list[exp.Expr] = []
        changed = False
        for c in _conjuncts(where.this):
            inner = c.this.args.get("query") if isinstance(c, exp.Not) and \
                isinstance(c.this, exp.In) else None
            inner = inner.this if isinstance(inner, exp.Subquery) else inner
            x = c.this.this if inner is not None else None
            if not isinstance(inner, exp.Select) or len(inner.selects) != 1 or \
                    _outer_columns(inner) or inner.args.get("from_") is None or \
                    not isinstance(inner.args["from_"].this, exp.Table) or \
                    any(inner.args.get(k) for k in ("joins", "group", "having", "limit")) or \
                    _aggregate_calls(inner.selects[0]) or x is None or not _aliases(x):
                out.append(c)
                continue
            inner = _realiased(inner, f"__notin{self.next_id}_{len(out)}")
            k = _unaliased(inner.selects[0])
            local = list(_conjuncts(inner.args["where"].this)) if inner.args.get("where") \
                else []

            def absent(*conds: exp.Expr, inner: exp.Select = inner,
                       local: list[exp.Expr] = local) -> exp.Expr:
                rows = exp.select(exp.Literal.number(1))
                rows.set("from_", inner.args["from_"].copy())
                rows.set("where", exp.Where(this=_and([*(e.copy() for e in local), *conds])))
                return exp.Not(this=exp.Exists(this=rows))

            def is_null(e: exp.Expr) -> exp.Expr:  # in parentheses: an operand of ``=``
                return exp.Paren(this=exp.Is(this=e.copy(), expression=exp.Null()))

            def always(e: exp.Expr) -> exp.Expr:  # TRUE on every row, over e's relation
                return exp.Paren(this=exp.Or(this=is_null(e), expression=exp.Not(
                    this=is_null(e))))

            out += [absent(exp.EQ(this=k.copy(), expression=x.copy())),
                    absent(is_null(k), exp.EQ(this=is_null(k), expression=always(x))),
                    absent(exp.EQ(this=always(k), expression=is_null(x)))]
            changed = True
        if not changed:
            return q
        q = q.copy()
        q.set("where", exp.Where(this=_and(out)))
        return q

    # IN and EXISTS: a semi-join is an inner join with the distinct keys of the subquery;
    # NOT EXISTS: an anti-join is the LEFT JOIN with them, kept where nothing matched
    def _semi_joins(self, q: exp.Select) -> exp.Select:
        """``x IN (SELECT k ...)`` and ``EXISTS (SELECT ... WHERE inner = outer ...)``
        among WHERE's conjuncts, as a join with ``(SELECT DISTINCT k ...)``: a row of the
        outer query is kept once when at least one row of the subquery matches it, which
        is what the join with the subquery's distinct keys keeps (a NULL key matches
        nothing, as IN's NULL filters the row). ``NOT EXISTS`` the same way, as the LEFT
        JOIN with those keys and ``__k0 IS NULL``: a matched row's key equals a key of the
        outer row, so it is not NULL. An EXISTS whose correlation also holds one
        ``inner <> outer`` counts instead (:func:`_exists_unequal`). NOT IN over a
        correlated subquery falls back: one NULL among the subquery's values makes it keep
        no row, which no join expresses (:meth:`_not_ins` rewrites the uncorrelated
        ones)."""
        where = q.args.get("where")
        if where is None:
            return q
        kept: list[exp.Expr] = []
        derived: list[exp.Join] = []
        anti: list[exp.Join] = []
        for c in _conjuncts(where.this):
            if isinstance(c, exp.Not) and isinstance(c.this, exp.In) and \
                    c.this.args.get("query") is not None:
                raise _Fallback("NOT IN over a correlated, joined, grouped or limited "
                                "subquery is not maintained incrementally yet")
            negated = isinstance(c, exp.Not) and isinstance(c.this, exp.Exists)
            rewritten = self._semi_join(c.this if negated else c, negated,
                                        len(derived) + len(anti))
            if rewritten is None:
                kept.append(c)
                continue
            derived += rewritten.inner
            anti += rewritten.left
            kept += rewritten.keep
        if not derived and not anti:
            return q
        q = q.copy()
        for join in derived + anti:  # LEFT JOINs after every inner one (_from)
            q.append("joins", join)
        q.set("where", exp.Where(this=_and(kept)))
        return q

    def _semi_join(self, c: exp.Expr, negated: bool, n: int) -> _SemiJoin | None:
        alias = f"__semi{self.next_id}_{n}"  # unique: no two blocks plan at one id
        if isinstance(c, exp.In) and c.args.get("query") is not None:
            inner = c.args["query"]
            inner = inner.this if isinstance(inner, exp.Subquery) else inner
            if not isinstance(inner, exp.Select) or len(inner.selects) != 1 or \
                    _outer_columns(inner):
                return None
            keys = inner.copy()
            keys.set("distinct", exp.Distinct())
            keys.set("expressions", [exp.alias_(_unaliased(keys.selects[0]), "__k0")])
            return _SemiJoin([exp.Join(this=_derived(keys, alias))], [], [exp.EQ(
                this=c.this.copy(), expression=exp.column("__k0", alias))])
        if not (isinstance(c, exp.Exists) and isinstance(c.this, exp.Select)) or \
                _grouped(c.this):
            return None
        split = _correlation(c.this)
        if split is None:
            return None
        local, pairs, unequal = split
        if unequal is not None:
            return _exists_unequal(c.this, local, pairs, unequal, alias, negated)
        if not pairs:
            return None
        source = _distinct_keys(c.this, local, pairs, alias)
        condition = _key_condition(pairs, alias)
        if negated:
            return _SemiJoin([], [exp.Join(this=source, side="LEFT", on=condition)],
                             [exp.Is(this=exp.column("__k0", alias), expression=exp.Null())])
        return _SemiJoin([exp.Join(this=source)], [], [condition])

    # FROM, JOIN and WHERE: scans, filters pushed to the scan they name, equi-joins
    def _from(self, q: exp.Select) -> Node:
        joins = list(q.args.get("joins") or [])
        if len(joins) == 1 and _side(joins[0]) == "RIGHT" and joins[0].args.get("on"):
            # ``a RIGHT JOIN b ON c`` is ``b LEFT JOIN a ON c``: the same rows (the columns
            # are qualified, so their order does not matter)
            j, q = joins[0], q.copy()
            q.set("joins", [exp.Join(this=q.args["from_"].this.copy(), side="LEFT",
                                     on=j.args["on"].copy())])
            q.set("from_", exp.From(this=j.this.copy()))
            joins = list(q.args["joins"])
        if len(joins) == 1 and _side(joins[0]) == "FULL":
            return self._full_join(q, joins[0])
        outer = [j for j in joins if _side(j)]
        inner = [j for j in joins if not _side(j)]
        # ``(a LEFT JOIN b ON p(a, b)) JOIN c ON q(a, c)`` is ``(a JOIN c ON q) LEFT JOIN b
        # ON p``: each row of ``a`` meets ``c`` the same way whatever ``b`` gave it, so the
        # inner joins run first. Not when ``q`` names ``b`` (it would drop the rows that
        # found no ``b``: a different join, not a reordering).
        nullable_before: set[str] = set()
        for j in joins:
            if _side(j):
                nullable_before.add(j.this.alias_or_name)
            elif j.args.get("on") is not None and _aliases(j.args["on"]) & nullable_before:
                raise _Fallback("an inner join whose ON names a LEFT JOIN's right side is "
                                "not maintained incrementally yet")
        sources = [q.args["from_"].this] + [j.this for j in inner]
        where = q.args.get("where")
        conjuncts = list(_conjuncts(where.this if where else None))
        for j in inner:
            if j.args.get("using"):
                raise _Fallback("JOIN ... USING is not maintained incrementally yet")
            conjuncts.extend(_conjuncts(j.args.get("on")))
        # a condition on a LEFT JOIN's right side filters after the join (its NULL rows
        # included: ``WHERE r.k IS NULL`` keeps the unmatched ones), never before it
        nullable = {j.this.alias_or_name for j in outer}
        after = [c for c in conjuncts if _aliases(c) & nullable]
        conjuncts = [c for c in conjuncts if not _aliases(c) & nullable]
        nodes: dict[str, Node] = {}
        for s in sources:
            nodes[s.alias_or_name] = self._source(s, q)
        acc, joined = self._inner_joins(nodes, conjuncts), set(nodes)
        for j in outer:
            acc = self._left_join(acc, j, q, joined)
            joined.add(j.this.alias_or_name)
        if after:
            acc = Filter(self._id(), acc, _renamed(_and(after)))
        return acc

    def _inner_joins(self, nodes: dict[str, Node], conjuncts: list[exp.Expr]) -> Node:
        pushed: dict[str, list[exp.Expr]] = {a: [] for a in nodes}
        rest = []
        for c in conjuncts:
            named = _aliases(c)
            if len(named) == 1 and next(iter(named)) in nodes:
                pushed[next(iter(named))].append(c)
            else:
                rest.append(c)
        for alias, preds in pushed.items():
            if preds:
                nodes[alias] = Filter(self._id(), nodes[alias], _renamed(_and(preds)))
        order = list(nodes)
        acc, joined = nodes[order[0]], {order[0]}
        waiting = order[1:]
        while waiting:
            # the next input an equality links to those joined so far, in FROM's order
            # (FROM a, b, c WHERE a.x = c.x AND c.y = b.y joins c before b)
            linked = [a for a in waiting if any(_equi(c, joined, a) for c in rest)] or \
                [a for a in waiting if a.startswith("__scalar") and not _keyed(nodes[a])]
            if not linked:
                raise _Fallback(f"input {waiting[0]!r} is joined without an equality to the "
                                "other inputs (a cross join)")
            alias = linked[0]
            waiting.remove(alias)
            keys = [c for c in rest if _equi(c, joined, alias)]
            rest = [c for c in rest if not any(c is k for k in keys)]
            lk, rk = zip(*(_sides(k, joined) for k in keys), strict=True) if keys \
                else ((), ())  # the one row of a global aggregate: joined to every row
            acc = Join(self._id(), acc, nodes[alias], tuple(map(_renamed, lk)),
                       tuple(map(_renamed, rk)))
            joined.add(alias)
        if rest:
            acc = Filter(self._id(), acc, _renamed(_and(rest)))
        return acc

    def _full_join(self, q: exp.Select, j: exp.Join) -> Node:
        """``a FULL JOIN b ON <equalities of a and b>``, the query's only join. Both sides
        are nullable, so every WHERE condition filters after the join, and ON can hold
        nothing else: a condition on one side alone in ON would not drop that side's rows,
        only unmatch them."""
        if j.args.get("using"):
            raise _Fallback("JOIN ... USING is not maintained incrementally yet")
        left, right = q.args["from_"].this, j.this
        la, ra = left.alias_or_name, right.alias_or_name
        on = list(_conjuncts(j.args.get("on")))
        keys = [c for c in on if _equi(c, {la}, ra)]
        if not keys or len(keys) != len(on):
            raise _Fallback("a FULL JOIN's ON is maintained when it is equalities of its "
                            "two sides alone")
        lk, rk = zip(*(_sides(k, {la}) for k in keys), strict=True)
        acc: Node = Join(self._id(), self._source(left, q), self._source(right, q),
                         tuple(map(_renamed, lk)), tuple(map(_renamed, rk)), kind="full")
        where = q.args.get("where")
        if where is not None:
            acc = Filter(self._id(), acc, _renamed(where.this))
        return acc

    def _left_join(self, acc: Node, j: exp.Join, q: exp.Select, joined: set[str]) -> Node:
        """``acc LEFT JOIN r ON <equalities of r and acc's inputs> [AND <conditions on r
        alone>]``: the conditions on ``r`` filter it before the join (a left row then
        matches only the rows they keep); anything else in ON has no rule yet."""
        if _side(j) != "LEFT":
            raise _Fallback(f"a {_side(j)} JOIN beside other joins is not maintained "
                            "incrementally yet")
        if j.args.get("using"):
            raise _Fallback("JOIN ... USING is not maintained incrementally yet")
        alias = j.this.alias_or_name
        right = self._source(j.this, q)
        on = list(_conjuncts(j.args.get("on")))
        keys = [c for c in on if _equi(c, joined, alias)]
        alone = [c for c in on if _aliases(c) == {alias} and not any(c is k for k in keys)]
        other = [c for c in on if not any(c is k for k in [*keys, *alone])]
        if not keys or other:
            raise _Fallback("a LEFT JOIN's ON is maintained when it is equalities with "
                            "the inputs before it and conditions on its right side alone")
        if alone:
            right = Filter(self._id(), right, _renamed(_and(alone)))
        lk, rk = zip(*(_sides(k, joined) for k in keys), strict=True)
        return Join(self._id(), acc, right, tuple(map(_renamed, lk)),
                    tuple(map(_renamed, rk)), kind="left")

    def _source(self, s: exp.Expr, q: exp.Select) -> Node:
        alias = s.alias_or_name
        if isinstance(s, exp.Table):
            used = sorted({c.name for c in _block_columns(q) if c.table == alias})
            return Scan(self._id(), s.name, alias, tuple(used))
        if isinstance(s, exp.Subquery):
            inner, _ = self.query(s.this)
            names = inner.names()
            return Project(self._id(), inner, tuple(
                (f"{alias}__{n}", exp.column(n, quoted=True)) for n in names))
        raise _Fallback(f"a {s.key.upper()} in FROM is not maintained incrementally")

    def _aggregate(self, q: exp.Select, child: Node
                   ) -> tuple[Node, tuple[tuple[str, exp.Expr], ...], tuple[str, ...]]:
        groups = [_renamed(g) for g in (q.args["group"].expressions
                                         if q.args.get("group") else [])]
        keys = tuple((f"g{i}", g) for i, g in enumerate(groups))
        calls: dict[str, AggregateCall] = {}
        for e in [*q.expressions, q.args.get("having")]:
            for call in _aggregate_calls(e) if e else []:
                renamed = _renamed(call)
                if renamed.sql() not in calls:
                    calls[renamed.sql()] = _call(f"a{len(calls)}", renamed)
        agg = Aggregate(self._id(), child, keys, tuple(calls.values()))
        table = {g.sql(): n for n, g in keys} | {s: c.name for s, c in calls.items()}
        node: Node = agg
        if q.args.get("having"):
            node = Filter(self._id(), agg, _over(_renamed(q.args["having"].this), table,
                                                 agg.names()))
        outputs = tuple((s.alias_or_name, _over(_renamed(_unaliased(s)), table, agg.names()))
                        for s in q.expressions)
        direct = {o.name: n for n, o in outputs if isinstance(o, exp.Column)}
        key = tuple(direct[n] for n, _ in keys) if keys and all(
            n in direct for n, _ in keys) else ()
        return node, outputs, key


def _inline_ctes(tree: exp.Expr) -> exp.Expr:
    """Each reference to a CTE as a subquery of its own (a CTE read twice is planned, and
    kept, twice)."""
    with_ = tree.args.get("with_") or tree.args.get("with")
    if with_ is None:
        return tree
    ctes = {c.alias_or_name: c.this for c in with_.expressions}
    tree = tree.copy()
    tree.set("with_" if "with_" in tree.args else "with", None)
    for _ in range(len(ctes) + 1):  # a CTE may read an earlier one
        refs = [t for t in tree.find_all(exp.Table) if t.name in ctes and not t.db]
        if not refs:
            break
        for t in refs:
            t.replace(_derived(ctes[t.name].copy(), t.alias_or_name))
    return tree


def _scalar(inner: exp.Select, alias: str, correlated_ok: bool
            ) -> tuple[exp.Expr, exp.Expr | None] | None:
    """The derived table of a scalar subquery (one aggregate expression, no GROUP BY) and
    the join condition of its correlations; None when it has no such form."""
    if len(inner.selects) != 1 or any(inner.args.get(k) for k in ("group", "having",
                                                                     "limit")) or \
            not _aggregate_calls(inner.selects[0]) or inner.args.get("from_") is None:
        return None
    split = _correlation(inner)
    if split is None or split[2] is not None:
        return None
    local, pairs, _ = split
    value = _unaliased(inner.selects[0])
    if pairs and (not correlated_ok or any(isinstance(x, exp.Count)
                                           for x in value.find_all(exp.Count))):
        return None
    body = exp.select(*(exp.alias_(i.copy(), f"__k{n}") for n, (i, _) in enumerate(pairs)),
                      exp.alias_(value.copy(), "__v"))
    body.set("from_", inner.args["from_"].copy())
    for j in inner.args.get("joins") or []:
        body.append("joins", j.copy())
    if local:
        body.set("where", exp.Where(this=_and([x.copy() for x in local])))
    if pairs:
        body.set("group", exp.Group(expressions=[i.copy() for i, _ in pairs]))
    return _derived(body, alias), _key_condition(pairs, alias) if pairs else None


def _realiased(q: exp.Select, alias: str) -> exp.Select:
    """``q`` (over one table) with that table named ``alias``, and its columns too."""
    q = q.copy()
    table = q.args["from_"].this
    old = table.alias_or_name
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    for c in _scope_columns(q):  # not a nested subquery's own table of the same name
        if c.table == old:
            c.set("table", exp.to_identifier(alias))
    return q


def _derived(select: exp.Select, alias: str) -> exp.Expr:
    return exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier(alias)))


def _inner_aliases(q: exp.Select) -> set[str]:
    return {s.alias_or_name for s in [q.args["from_"].this] +
            [j.this for j in q.args.get("joins") or []]} if q.args.get("from_") else set()


def _outer_columns(q: exp.Select) -> list[exp.Column]:
    """The columns of ``q``'s clauses that name a relation outside it (correlation)."""
    own = _inner_aliases(q)
    return [c for c in _scope_columns(q) if c.table and c.table not in own]


def _scope_columns(q: exp.Select) -> list[exp.Column]:
    """The columns of ``q``'s clauses that name ``q``'s relations or one outside it."""
    return [c for e in _block_expressions(q) for c in _columns(e)]


def _columns(e: exp.Expr) -> list[exp.Column]:
    """The columns of ``e`` by SQL's scopes: a subquery in ``e`` sees the relations around
    it and its own, so of its columns only those its own FROM does not name are ``e``'s
    (TPC-H Q20's IN holds a scalar subquery correlated with the IN's table)."""
    out: list[exp.Column] = []
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Select) and node is not e:
            nested = _inner_aliases(node)
            out += [c for c in _scope_columns(node) if c.table not in nested]
            continue
        if isinstance(node, exp.Column):
            out.append(node)
        stack.extend(node.iter_expressions())
    return out


@dataclass(frozen=True)
class _SemiJoin:
    """A subquery condition of WHERE as joins: inner joins, LEFT JOINs (after every inner
    one) and the conditions that replace it."""

    inner: list[exp.Join]
    left: list[exp.Join]
    keep: list[exp.Expr]


def _grouped(inner: exp.Select) -> bool:
    """Whether subquery ``inner`` groups, limits or joins (no rewrite here), or has no
    FROM."""
    return any(inner.args.get(k) for k in ("group", "having", "limit", "joins")) or \
        inner.args.get("from_") is None


def _distinct_keys(inner: exp.Select, local: list[exp.Expr], pairs: _Pairs,
                   alias: str) -> exp.Expr:
    """``(SELECT DISTINCT <inner sides of pairs> FROM b WHERE <local>) alias``."""
    keys = exp.select(*(exp.alias_(i.copy(), f"__k{n}") for n, (i, _) in enumerate(pairs)))
    keys.set("from_", inner.args["from_"].copy())
    keys.set("distinct", exp.Distinct())
    if local:
        keys.set("where", exp.Where(this=_and([x.copy() for x in local])))
    return _derived(keys, alias)


def _counts(inner: exp.Select, local: list[exp.Expr], pairs: _Pairs,
            extra: exp.Expr | None, alias: str) -> exp.Expr:
    """``(SELECT <inner sides of pairs>[, extra], COUNT(*) AS __n FROM b WHERE <local>
    GROUP BY them) alias``: the subquery's rows per key."""
    sides = [i for i, _ in pairs] + ([extra] if extra is not None else [])
    counted = exp.select(*(exp.alias_(i.copy(), f"__k{n}") for n, i in enumerate(sides)),
                         exp.alias_(exp.Count(this=exp.Star()), "__n"))
    counted.set("from_", inner.args["from_"].copy())
    if local:
        counted.set("where", exp.Where(this=_and([x.copy() for x in local])))
    counted.set("group", exp.Group(expressions=[i.copy() for i in sides]))
    return _derived(counted, alias)


def _exists_unequal(inner: exp.Select, local: list[exp.Expr], pairs: _Pairs,
                    unequal: tuple[exp.Expr, exp.Expr], alias: str, negated: bool
                    ) -> _SemiJoin | None:
    """``[NOT] EXISTS (SELECT ... FROM b WHERE b.k = a.k AND b.c <> a.c AND <b only>)``
    (TPC-H Q21) by counting: the rows of ``b`` whose ``c`` differs from ``a.c`` are those
    of its key whose ``c`` is not NULL, minus those whose ``c`` equals ``a.c``; and when
    ``a.c`` is NULL, no row's ``c <> a.c`` holds. Both counts are grouped aggregates over
    ``b``, so a change of ``b`` moves only the counts of the keys it touches, and each is
    joined to the outer rows through those keys. EXISTS joins the first count and LEFT
    JOINs the second; NOT EXISTS LEFT JOINs both."""
    if not pairs:
        return None
    c, outer = unequal
    known = [*local, exp.Not(this=exp.Is(this=c.copy(), expression=exp.Null()))]
    every, same = f"{alias}_all", f"{alias}_same"
    on_every = _key_condition(pairs, every)
    on_same = _and([_key_condition(pairs, same), exp.EQ(
        this=outer.copy(), expression=exp.column(f"__k{len(pairs)}", same))])
    n_every = exp.column("__n", every)
    n_same = exp.func("COALESCE", exp.column("__n", same), exp.Literal.number(0))
    same_join = exp.Join(this=_counts(inner, local, pairs, c, same), side="LEFT", on=on_same)
    if negated:
        differ = exp.Sub(this=exp.func("COALESCE", n_every, exp.Literal.number(0)),
                         expression=n_same)
        return _SemiJoin([], [exp.Join(this=_counts(inner, known, pairs, None, every),
                                       side="LEFT", on=on_every), same_join],
                         [exp.Paren(this=exp.Or(
                             this=exp.Is(this=outer.copy(), expression=exp.Null()),
                             expression=exp.EQ(this=differ,
                                               expression=exp.Literal.number(0))))])
    return _SemiJoin([exp.Join(this=_counts(inner, known, pairs, None, every))], [same_join],
                     [on_every, exp.Not(this=exp.Is(this=outer.copy(), expression=exp.Null())),
                      exp.GT(this=exp.Sub(this=n_every, expression=n_same),
                             expression=exp.Literal.number(0))])


_Pairs = list[tuple[exp.Expr, exp.Expr]]


def _correlation(inner: exp.Select
                 ) -> tuple[list[exp.Expr], _Pairs, tuple[exp.Expr, exp.Expr] | None] | None:
    """The WHERE conjuncts of subquery ``inner`` split into those on its own relations, its
    equality correlations (inner side, outer side), and at most one ``<>`` correlation (the
    same); None when a correlation is anything else."""
    own = _inner_aliases(inner)
    where = inner.args.get("where")
    local: list[exp.Expr] = []
    pairs: _Pairs = []
    unequal: list[tuple[exp.Expr, exp.Expr]] = []
    for c in _conjuncts(where.this if where else None):
        if _aliases(c) <= own:
            local.append(c)
            continue
        if not isinstance(c, exp.EQ | exp.NEQ):
            return None
        a, b = _aliases(c.this), _aliases(c.expression)
        if a and a <= own and b and not b & own:
            pair = (c.this, c.expression)
        elif b and b <= own and a and not a & own:
            pair = (c.expression, c.this)
        else:
            return None
        (pairs if isinstance(c, exp.EQ) else unequal).append(pair)
    if len(unequal) > 1:
        return None
    return local, pairs, unequal[0] if unequal else None


def _key_condition(pairs: _Pairs, alias: str) -> exp.Expr:
    """The outer sides of ``pairs`` equal to the derived table ``alias``'s keys."""
    return _and([exp.EQ(this=o.copy(), expression=exp.column(f"__k{n}", alias))
                 for n, (_, o) in enumerate(pairs)])


def _keyed(node: Node) -> bool:
    """Whether ``node`` may hold more than one row: anything but a global aggregate (under
    the projection that names its columns)."""
    while isinstance(node, Project | Filter):
        if isinstance(node, Filter):
            return True  # a filtered global aggregate may hold no row: not joined keyless
        node = node.child
    return not (isinstance(node, Aggregate) and not node.keys)


def _refuse_unmaintainable(q: exp.Select) -> None:
    """Raise :class:`_Fallback` for what has no incremental rule (in this block, not in its
    FROM subqueries, which are planned on their own)."""
    if q.args.get("offset"):
        raise _Fallback("OFFSET is not maintained incrementally")
    for e in _block_expressions(q):
        for node in e.walk():
            if isinstance(node, exp.Window):
                raise _Fallback("a window function (OVER) is not maintained incrementally yet")
            if isinstance(node, _NON_DETERMINISTIC):
                raise _Fallback(f"{node.key.upper()}() is not deterministic: a recompute "
                                "would not equal the maintained rows")
            if isinstance(node, exp.Anonymous):
                raise _Fallback(f"function {node.name}() is unknown to the planner (a UDF?): "
                                "its determinism cannot be checked")
            if isinstance(node, exp.Exists | exp.Subquery) or (
                    isinstance(node, exp.In) and node.args.get("query")):
                raise _Fallback("a subquery in an expression (EXISTS, IN, a scalar "
                                "subquery) is not maintained incrementally yet")


def _order(q: exp.Select, names: tuple[str, ...]) -> tuple[exp.Expr, ...]:
    """ORDER BY of a top-N, over the block's output columns (by their names)."""
    order = q.args.get("order")
    items = order.expressions if order else []
    out = []
    for item in items:
        col = item.this
        if not (isinstance(col, exp.Column) and not col.table and col.name in names):
            raise _Fallback("a top-N ordered by an expression it does not select is not "
                            "maintained incrementally")
        ordered = item.copy()
        ordered.set("this", exp.column(col.name, quoted=True))
        out.append(ordered)
    return tuple(out)


def _limit(q: exp.Select) -> int:
    value = q.args["limit"].expression
    if not isinstance(value, exp.Literal) or not value.is_int:
        raise _Fallback("a LIMIT that is not a number is not maintained incrementally")
    return int(value.this)


def _block_expressions(q: exp.Select) -> list[exp.Expr]:
    out = list(q.expressions)
    for k in ("where", "having", "group"):
        if q.args.get(k):
            out.append(q.args[k])
    out += [j.args["on"] for j in q.args.get("joins") or [] if j.args.get("on")]
    return out


def _block_columns(q: exp.Select) -> Iterable[exp.Column]:
    for e in _block_expressions(q):
        yield from e.find_all(exp.Column)


def _aggregate_calls(e: exp.Expr) -> list[exp.Expr]:
    found: list[exp.Expr] = [n for n in e.find_all(exp.AggFunc)
                                   if not isinstance(n.parent, exp.Window)]
    return [n for n in found if not any(isinstance(p, exp.AggFunc) for p in _ancestors(n))]


def _ancestors(n: exp.Expr) -> Iterable[object]:
    p = n.parent
    while p is not None:
        yield p
        p = p.parent


def _call(name: str, call: exp.Expr) -> AggregateCall:
    kind = next((k for cls, k in _AGGREGATES.items() if type(call) is cls), None)
    if kind is None:
        raise _Fallback(f"aggregate {call.key.upper()}() is not maintained incrementally yet")
    arg = call.this
    if isinstance(arg, exp.Distinct):
        if kind != "COUNT" or len(arg.expressions) != 1:
            raise _Fallback(f"{kind}(DISTINCT ...) is not maintained incrementally yet")
        return AggregateCall(name, "COUNT_DISTINCT", arg.expressions[0])
    if isinstance(arg, exp.Star):
        return AggregateCall(name, "COUNT_STAR", None)
    return AggregateCall(name, kind, arg)


def _over(e: exp.Expr, table: dict[str, str], names: tuple[str, ...]
          ) -> exp.Expr:
    """``e`` with its grouped expressions and aggregate calls replaced by the aggregate's
    output columns; a column left over is neither grouped nor aggregated."""
    out = e.transform(lambda n: exp.column(table[n.sql()], quoted=True)
                      if not isinstance(n, exp.Identifier) and n.sql() in table else n)
    stray = [c.name for c in out.find_all(exp.Column) if c.name not in names]
    if stray:
        raise ViewQueryError(f"column {stray[0].split('__', 1)[-1]!r} is neither grouped "
                             "nor aggregated")
    return out


def _renamed(e: exp.Expr) -> exp.Expr:
    """``alias.column`` as the plan's column ``alias__column``."""
    return e.copy().transform(
        lambda n: exp.column(f"{n.table}__{n.name}", quoted=True)
        if isinstance(n, exp.Column) and n.table else n)


def _unaliased(e: exp.Expr) -> exp.Expr:
    return e.this if isinstance(e, exp.Alias) else e


def _conjuncts(e: exp.Expr | None) -> Iterable[exp.Expr]:
    if e is None:
        return
    if isinstance(e, exp.Or):
        # (k = k' AND p) OR (k = k' AND q): k = k' AND (p OR q), so that an equality every
        # branch repeats can be a join key
        branches = [list(_conjuncts(b)) for b in _disjuncts(e)]
        common = [c for c in branches[0]
                  if all(any(c == o for o in b) for b in branches[1:])]
        if common:
            yield from common
            rests = [[c for c in b if not any(c == k for k in common)] for b in branches]
            if all(rests):
                yield _or([_and(r) for r in rests])
            return
        yield e
    elif isinstance(e, exp.And):
        yield from _conjuncts(e.this)
        yield from _conjuncts(e.expression)
    elif isinstance(e, exp.Paren):
        yield from _conjuncts(e.this)
    else:
        yield e


def _disjuncts(e: exp.Expr) -> Iterable[exp.Expr]:
    if isinstance(e, exp.Or):
        yield from _disjuncts(e.this)
        yield from _disjuncts(e.expression)
    elif isinstance(e, exp.Paren):
        yield from _disjuncts(e.this)
    else:
        yield e


def _or(preds: list[exp.Expr]) -> exp.Expr:
    out: exp.Expr = exp.Paren(this=preds[0])
    for p in preds[1:]:
        out = exp.or_(out, exp.Paren(this=p))
    return exp.Paren(this=out)


def _and(preds: list[exp.Expr]) -> exp.Expr:
    out: exp.Expr = preds[0]
    for p in preds[1:]:
        out = exp.and_(out, p)
    return out


def _side(j: exp.Join) -> str:
    """A join's outer side (LEFT, RIGHT, FULL), or the kind that is not an inner join
    (SEMI, ANTI); empty for an inner join."""
    side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
    if side:
        return side
    return kind if kind in ("SEMI", "ANTI", "OUTER") else ""


def _aliases(e: exp.Expr) -> set[str]:
    """The relations ``e`` names (not those a subquery in it names of its own)."""
    return {c.table for c in _columns(e)}


def _equi(c: exp.Expr, joined: set[str], alias: str) -> bool:
    if not isinstance(c, exp.EQ):
        return False
    a, b = _aliases(c.this), _aliases(c.expression)
    return (bool(a) and a <= joined and b == {alias}) or (bool(b) and b <= joined
                                                          and a == {alias})


def _sides(c: exp.Expr, joined: set[str]) -> tuple[exp.Expr, exp.Expr]:
    """The (joined side, new side) of equality ``c``."""
    assert isinstance(c, exp.EQ)
    if _aliases(c.this) <= joined:
        return c.this, c.expression
    return c.expression, c.this
