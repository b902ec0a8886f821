"""A checkpointed DAG's I/O, as Airflow's hooks hold it: its checkpoint storage and data
root, opened with the AWS connection its settings name (or the AWS credential chain), and
the coordinator over them. ``CheckpointSettings`` says where things are; this opens them.

A coordinator opened here announces the epochs it aborts (the alert record, the log line,
the DAG's notifiers) from whichever process decides the abort: the begin step expiring an
overdue epoch, the commit step, the watchdog or the deadline callback. The announcer is
built before the coordinator and handed to it, so nothing is set on a coordinator after
it is built."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk import BaseHook

from checkpointing import Coordinator, Storage, open_storage
from checkpointing.coordination.pipeline_records import PipelineRecords

from ..notifications import AlertSettings, announce
from ..shared.settings import CheckpointSettings, metrics_enabled

if TYPE_CHECKING:
    from checkpointing.protocol.barrier import Barrier
    from checkpointing.protocol.epoch_metadata import EpochMetadata


@dataclass(frozen=True)
class AbortAnnouncer:
    """The coordinator's abort listener: announces an aborted epoch through the pipeline's
    records (so that one process alerts) and the DAG's alert settings."""

    pipeline_id: str
    records: PipelineRecords
    alerts: AlertSettings

    def __call__(self, meta: EpochMetadata, barrier: Barrier | None) -> None:
        announce(self, meta, barrier, self.alerts)


class CheckpointHook(BaseHook):
    """Opens what a checkpointed DAG's settings name: ``get_storage()`` (checkpoint
    storage), ``get_data_storage()`` (the data root) and ``get_coordinator()``."""

    hook_name = "DAG checkpoints"

    def __init__(self, settings: CheckpointSettings) -> None:
        super().__init__()
        self.settings = settings

    def get_conn(self) -> Storage:
        """The checkpoint storage (Airflow's name for what a hook opens)."""
        return self.get_storage()

    def get_storage(self) -> Storage:
        s = self.settings
        if not s.storage.strip():
            raise ValueError(f"pipeline {s.pipeline_id!r}: no checkpoint storage configured "
                             "(set CKPT_STORAGE or CheckpointSettings.storage)")
        if s.aws_conn_id and urlparse(s.storage).scheme in ("s3", "s3a"):
            return _storage_from_connection(s.storage, s.aws_conn_id, s.endpoint_url)
        return open_storage(s.storage, endpoint_url=s.endpoint_url)

    def get_data_storage(self) -> Storage:
        """The data root (``data``), opened as the checkpoint storage is."""
        s = self.settings
        if not s.data.strip():
            raise ValueError(f"pipeline {s.pipeline_id!r}: no data root configured "
                             "(set CKPT_DATA or CheckpointSettings.data)")
        return CheckpointHook(replace(s, storage=s.data)).get_storage()

    def get_coordinator(self, **kwargs: Any) -> Coordinator:
        """The pipeline's coordinator over checkpoint storage. With Airflow's metrics on,
        it reports through them; unless ``on_abort`` is given, its aborts are announced
        (:class:`AbortAnnouncer`)."""
        s = self.settings
        if "listener" not in kwargs and metrics_enabled():
            from ..shared.metrics import AirflowMetrics

            kwargs["listener"] = AirflowMetrics(s.pipeline_id, s.dag_id)
        storage = self.get_storage()
        if "on_abort" not in kwargs:
            records = PipelineRecords.open(storage, s.pipeline_id, s.config,
                                           kwargs.get("clock") or time.time)
            kwargs["on_abort"] = AbortAnnouncer(s.pipeline_id, records, s.alerts)
        return Coordinator(storage, s.pipeline_id, s.config, **kwargs)


def _storage_from_connection(uri: str, conn_id: str, endpoint_url: str | None) -> Storage:
    """S3 storage whose client comes from an Airflow AWS connection, with this library's
    retry and timeout configuration (botocore standard retries)."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from botocore.config import Config

    from checkpointing.storage.s3 import S3Storage, retry_config

    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3", config=Config(
        retries=retry_config(), connect_timeout=5.0,
        read_timeout=30.0, s3={"addressing_style": "path"}))
    parsed = urlparse(uri)
    client = hook.get_conn()
    return S3Storage(parsed.netloc, parsed.path,
                     endpoint_url=endpoint_url or hook.conn_config.endpoint_url, client=client)
