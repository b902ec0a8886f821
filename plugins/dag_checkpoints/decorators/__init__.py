"""``@task.checkpointed_spark``: the TaskFlow form of the checkpointed Spark operator."""

from .checkpointed_spark import checkpointed_spark_task

__all__ = ["checkpointed_spark_task"]
