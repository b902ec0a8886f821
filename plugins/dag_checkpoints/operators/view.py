"""``CheckpointedViewOperator``: a view declared by its SQL, maintained each epoch from its
inputs' changes (:mod:`spark_jobs.runtime.view_job`), committed as one table version.

The query is Spark SQL over the task's inputs, named as ``table_inputs``, ``views`` and
``file_inputs`` name them.
Each epoch reads what the inputs changed up to the versions the barrier pinned; the
refresh planner maintains the view from those changes or recomputes it, and records which
and why in the task's state handle (``ckpt show``, the Epochs page). The output's key is
the query's GROUP BY columns (or ``keys=``): the table is merged by it; a view without a
key grows its table by the rows an epoch adds, and is overwritten with its whole result
when an epoch removes some. The same query run as a batch over the inputs
at the pinned versions is the right answer; ``verify_every`` checks it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from checkpointing.protocol.file_inputs import FileInput
from checkpointing.protocol.view_task import DEFAULT_FULL_REFRESH_ABOVE, ViewTask
from checkpointing.tables.spec import TableSpec

from .spark import CheckpointedSparkOperator

#: the runtime's job every view task runs
VIEW_JOB = "spark_jobs.runtime.view_job:maintain_view"


def view_table(table: TableSpec | str) -> dict[str, Any]:
    """A view's output table as the plan records it: a :class:`TableSpec` without its mode
    and keys (the view decides them), or a Delta table's location."""
    spec = TableSpec(table) if isinstance(table, str) else table
    return {k: v for k, v in spec.to_json().items() if k not in ("mode", "keys")}


class CheckpointedViewOperator(CheckpointedSparkOperator):
    """An incremental view: ``sql`` over ``table_inputs``, maintained into ``table``.

    :param sql: the view's query (Spark SQL, one ``SELECT``) over the table inputs' names.
    :param output: the output's name (its Airflow Asset when the epoch publishes).
    :param table: the output table: a :class:`TableSpec` (its mode and keys are the view's)
        or a Delta table's location.
    :param table_inputs: ``{name: TableInput}``: the tables the query reads.
    :param views: ``{name: view task}``: earlier views of the DAG the query reads by that
        name (their task, or its id): each epoch reads their change from their handles of
        the same epoch, not their tables. A task given here is wired upstream.
    :param file_inputs: ``{name: FileInput}``: files landed under a prefix of the data
        root, read as one table of a declared schema: each epoch reads the files landed
        since, and a file rewritten in place retracts what its earlier content added.
    :param keys: the output's key when the query has no GROUP BY that says it.
    :param verify_every: every this many epochs, recompute the view in full at the pinned
        versions and decline the epoch if the maintained result differs (0: never).
    :param full_refresh_above: before any cost is recorded, a change of more than this
        fraction of the inputs' bytes is refreshed by a full recompute.

    The other options are :class:`CheckpointedSparkOperator`'s (``expects``,
    ``input_grace``, ``settings``) and BaseOperator's.
    """

    ui_color = "#b3de69"

    def __init__(self, *, sql: str, output: str, table: TableSpec | str,
                 table_inputs: Mapping[str, Any] | None = None,
                 views: Mapping[str, Any] | None = None,
                 file_inputs: Mapping[str, FileInput] | None = None, keys: Sequence[str] = (),
                 verify_every: int = 0,
                 full_refresh_above: float = DEFAULT_FULL_REFRESH_ABOVE, **kwargs: Any):
        if "job" in kwargs or "outputs" in kwargs:
            raise TypeError("a view's job and outputs are its query's: give sql= and output=")
        super().__init__(job=VIEW_JOB, outputs=[output],
                         table_inputs=dict(table_inputs or {}), **kwargs)
        upstream = {n: v if isinstance(v, str) else v.task_id
                    for n, v in (views or {}).items()}
        files = dict(file_inputs or {})
        kinds = {"a table input": set(self.table_inputs), "a view": set(upstream),
                 "a file input": set(files)}
        for (a, one), (b, other) in combinations(kinds.items(), 2):
            both = sorted(one & other)
            if both:
                raise ValueError(f"{self.task_id}: {', '.join(both)} named both as {a} and "
                                 f"as {b}")
        declared = set().union(*kinds.values())
        # Imported here: the planner brings sqlglot (0.3 s), which a DAG of Spark jobs alone,
        # parsed with this module (the operators package), never uses.
        from checkpointing.ivm.planner import query_tables

        unknown = sorted(query_tables(sql) - declared)
        if unknown:
            raise ValueError(f"{self.task_id}: the view reads {', '.join(unknown)}, not "
                             f"declared in table_inputs, views or file_inputs (declared: "
                             f"{', '.join(sorted(declared)) or 'none'})")
        for v in (views or {}).values():
            if not isinstance(v, str):
                v >> self
        self.view_task = ViewTask(sql, output, view_table(table), tuple(keys), verify_every,
                                  full_refresh_above, upstream, files)
