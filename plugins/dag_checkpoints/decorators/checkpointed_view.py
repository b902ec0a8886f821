"""``@task.checkpointed_view``: a view declared by a function returning its SQL.

The function runs when the DAG is parsed (its query goes into every epoch's barrier); its
name is the task id and its docstring the task's documentation::

    @task.checkpointed_view(output="revenue", table=TableSpec("s3://lake/gold/revenue"),
                            table_inputs={"orders": TableInput("s3://lake/bronze/orders")})
    def revenue():
        "Revenue per customer."
        return "SELECT customer, SUM(amount) AS revenue FROM orders GROUP BY customer"

    revenue()  # inside the DAG: creates the task

Options: :class:`~dag_checkpoints.operators.view.CheckpointedViewOperator`'s but ``sql``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..operators.view import CheckpointedViewOperator


class _ViewFactory:
    """What the decorator returns: calling it in a DAG creates the view's task."""

    def __init__(self, fn: Callable[[], str], options: dict[str, Any]):
        functools.update_wrapper(self, fn)
        self.fn, self.options = fn, options

    def override(self, **options: Any) -> _ViewFactory:
        """The same view with some options replaced (``task_id=`` for a second copy)."""
        return _ViewFactory(self.fn, {**self.options, **options})

    def __call__(self, *args: Any, **kwargs: Any) -> CheckpointedViewOperator:
        if args or kwargs:
            raise TypeError(f"@task.checkpointed_view function {self.fn.__name__} takes no "
                            "arguments: its inputs are its table_inputs")
        sql = self.fn()
        if not isinstance(sql, str):
            raise TypeError(f"@task.checkpointed_view function {self.fn.__name__} must "
                            f"return its query as a str, not {type(sql).__name__}")
        options = {"task_id": self.fn.__name__, **self.options}
        if self.fn.__doc__ and "doc_md" not in options:
            options["doc_md"] = self.fn.__doc__
        return CheckpointedViewOperator(sql=sql, **options)


def checkpointed_view_task(python_callable: Callable[[], str] | None = None,
                           **options: Any) -> Any:
    """The ``@task.checkpointed_view`` decorator (module docstring)."""
    if python_callable is not None:
        return _ViewFactory(python_callable, options)
    return lambda fn: _ViewFactory(fn, options)
