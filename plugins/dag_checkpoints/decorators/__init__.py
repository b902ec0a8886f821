"""``@task.checkpointed_spark`` and ``@task.checkpointed_view``: the TaskFlow forms of the
checkpointed Spark operator and of the incremental view."""

from .checkpointed_spark import checkpointed_spark_task
from .checkpointed_view import checkpointed_view_task

__all__ = ["checkpointed_spark_task", "checkpointed_view_task"]
