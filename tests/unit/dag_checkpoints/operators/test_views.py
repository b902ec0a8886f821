"""The view operator and ``@task.checkpointed_view``: a view's query goes into the epoch's
plan when the DAG is parsed; a query that does not parse, or reads a table the task does
not declare, is refused then, in one line."""

from __future__ import annotations

import pytest

from checkpointing.protocol.table_inputs import TableInput
from checkpointing.tables.spec import TableSpec

ORDERS = {"orders": TableInput("file:///tmp/lake/bronze/orders")}
SQL = "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer"


def test_a_view_s_query_and_table_are_in_its_epoch_plan():
    from airflow.sdk import DAG
    from dag_checkpoints import CheckpointedViewOperator, CheckpointSettings, checkpoint_dag
    from dag_checkpoints.decorators import checkpointed_view_task

    @checkpointed_view_task(output="big", table="file:///tmp/lake/gold/big",
                            table_inputs=ORDERS, verify_every=10)
    def big_customers():
        """Customers with a large total."""
        return "SELECT customer FROM orders WHERE amount > 100"

    with DAG("views_test", schedule=None) as dag:
        totals = CheckpointedViewOperator(
            task_id="totals", sql=SQL, output="totals", table_inputs=ORDERS,
            table=TableSpec("file:///tmp/lake/gold/totals", mode="append", name="gold.totals"))
        totals >> big_customers()
    steps = checkpoint_dag(dag, CheckpointSettings("views_test", storage="file:///tmp/x"))
    view = steps.plan["totals"].view
    assert view is not None and view.sql == SQL and view.output == "totals"
    # the table's mode and keys are the view's, decided from its query when it runs
    assert view.table == {"location": "file:///tmp/lake/gold/totals", "partition_by": [],
                          "format": "delta", "name": "gold.totals"}
    assert steps.plan["totals"].publishes and steps.plan["totals"].table_inputs == ORDERS
    big = steps.plan["big_customers"]
    assert big.upstream == ("totals",) and big.view is not None
    assert big.view.verify_every == 10 and big.view.table["location"].endswith("/big")
    assert dag.get_task("big_customers").doc_md == "Customers with a large total."
    assert [x.name for x in steps.commit.outlets] == ["views_test.big", "views_test.totals"]


@pytest.mark.parametrize("sql, message", [
    ("SELECT customer FROM orders o JOIN refunds r ON o.id = r.id",
     "reads refunds, not declared in table_inputs, views or file_inputs"),
    ("SELEC customer FROM orders", "does not parse"),
    ("INSERT INTO orders VALUES (1)", "a view is a query"),
])
def test_a_view_that_cannot_run_is_refused_when_the_dag_is_parsed(sql, message):
    from dag_checkpoints import CheckpointedViewOperator

    with pytest.raises(ValueError, match=message) as refused:
        CheckpointedViewOperator(task_id="v", sql=sql, output="v", table="file:///tmp/v",
                                 table_inputs=ORDERS)
    assert "\n" not in str(refused.value)


def test_the_decorator_wants_a_query_and_no_arguments():
    from airflow.sdk import DAG
    from dag_checkpoints.decorators import checkpointed_view_task

    def not_sql():
        return 42

    with DAG("views_bad", schedule=None):
        with pytest.raises(TypeError, match="must return its query as a str"):
            checkpointed_view_task(not_sql, output="x", table="file:///tmp/x",
                                   table_inputs=ORDERS)()
        with pytest.raises(TypeError, match="takes no arguments"):
            checkpointed_view_task(lambda: SQL, output="x", table="file:///tmp/x",
                                   table_inputs=ORDERS)(1)


def test_the_guide_s_views_are_two_view_tasks():
    """docs/guides/views.md's block, run as written inside a DAG: a decorated view and an
    operator, each with its query and table in the epoch's plan."""
    import re
    from pathlib import Path

    from airflow.sdk import DAG
    from dag_checkpoints import CheckpointSettings, checkpoint_dag

    guide = (Path(__file__).parents[4] / "docs/guides/views.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", guide, re.S)
               if "checkpointed_view" in b]
    with DAG("guide_views", schedule=None) as dag:
        scope: dict = {}
        exec(compile(block, "views.md", "exec"), scope)  # noqa: S102 - the doc's own code
        scope["customer_totals"]()
    steps = checkpoint_dag(dag, CheckpointSettings("guide_views", storage="file:///tmp/g"))
    totals, big = steps.plan["customer_totals"].view, steps.plan["big_orders"].view
    assert totals is not None and "GROUP BY customer" in totals.sql
    assert big is not None and big.verify_every == 7
    assert dag.get_task("customer_totals").doc_md.startswith("Per customer")
