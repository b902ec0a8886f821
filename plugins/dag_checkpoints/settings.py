"""How a DAG is checkpointed: the CheckpointConfig policies plus where storage is and how
Spark runs. Values may come from environment variables so that one DAG file serves a
laptop (local storage, local Spark) and a cluster (S3, a Spark master)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from checkpointing import CheckpointConfig, Coordinator, open_storage


@dataclass(frozen=True)
class CheckpointSettings:
    pipeline_id: str
    storage: str = field(default_factory=lambda: os.environ.get("CKPT_STORAGE", ""))
    data: str = field(default_factory=lambda: os.environ.get("CKPT_DATA", ""))
    endpoint_url: str | None = field(
        default_factory=lambda: os.environ.get("AWS_ENDPOINT_URL") or None)
    config: CheckpointConfig = field(default_factory=CheckpointConfig)
    #: "local": jobs run in the task process with a local SparkSession; "submit": through
    #: spark-submit to ``spark_master`` (the code shipped with --py-files)
    spark_mode: str = field(default_factory=lambda: os.environ.get("CKPT_SPARK_MODE", "local"))
    spark_master: str | None = field(
        default_factory=lambda: os.environ.get("CKPT_SPARK_MASTER") or None)

    def coordinator(self, **kwargs) -> Coordinator:
        if not self.storage:
            raise ValueError(f"pipeline {self.pipeline_id!r}: no checkpoint storage configured "
                             "(set CKPT_STORAGE or CheckpointSettings.storage)")
        return Coordinator(open_storage(self.storage, endpoint_url=self.endpoint_url),
                           self.pipeline_id, self.config, **kwargs)
