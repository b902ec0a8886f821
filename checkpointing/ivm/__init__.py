"""Incremental views: a view is a SQL query over named inputs; each epoch maintains its
result from the inputs' changes alone (signed rows, DBSP's Z-sets), or recomputes it whole
when some part of the query has no incremental rule, saying why.

- :mod:`~checkpointing.ivm.planner`: the query, read by sqlglot, as a tree of operators;
- :mod:`~checkpointing.ivm.operators`: the operators and the plan;
- :mod:`~checkpointing.ivm.rules`: one rule per operator, as SQL statements;
- :mod:`~checkpointing.ivm.maintain`: one epoch of a plan on an engine that runs SQL;
- :mod:`~checkpointing.ivm.deferred`: statements folded into the query that reads them;
- :mod:`~checkpointing.ivm.explain`: the plan in words.
"""
