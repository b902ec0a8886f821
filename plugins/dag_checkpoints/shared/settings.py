"""How a DAG is checkpointed: the CheckpointConfig policies plus where storage is, how
Spark runs and where alerts go. Values may come from environment variables so that one DAG
file serves a laptop (local storage, local Spark) and a cluster (S3, a Spark master)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from checkpointing import CheckpointConfig

from ..notifications import AlertSettings
from .expected_inputs import validate_templates

SPARK_MODES = ("connect", "local", "submit")


@dataclass(frozen=True)
class CheckpointSettings:
    """Everything the plugin needs to checkpoint one DAG (``pipeline_id`` is its dag id):
    where things are, not open connections (:class:`..hooks.checkpoint.CheckpointHook`
    opens them).

    ``storage`` is ``file:///path`` or ``s3://bucket/prefix``. S3 credentials come from the
    standard AWS chain, or from the Airflow connection ``aws_conn_id`` when set (its
    ``endpoint_url`` extra selects MinIO or another S3-compatible server).
    """

    pipeline_id: str
    storage: str = field(default_factory=lambda: os.environ.get("CKPT_STORAGE", ""))
    data: str = field(default_factory=lambda: os.environ.get("CKPT_DATA", ""))
    endpoint_url: str | None = field(
        default_factory=lambda: os.environ.get("AWS_ENDPOINT_URL") or None)
    aws_conn_id: str | None = field(
        default_factory=lambda: os.environ.get("CKPT_AWS_CONN_ID") or None)
    config: CheckpointConfig = field(default_factory=CheckpointConfig)
    #: "connect": jobs run as clients of the Spark Connect server of the Airflow connection
    #: ``spark_connect_conn_id`` (a long-lived driver: no JVM per task); "local": in the task
    #: process with a local SparkSession; "submit": spark-submit to the master of the Airflow
    #: connection ``spark_conn_id`` (the code shipped with --py-files)
    spark_mode: str = field(default_factory=lambda: os.environ.get("CKPT_SPARK_MODE", "local"))
    spark_conn_id: str = field(
        default_factory=lambda: os.environ.get("CKPT_SPARK_CONN_ID", "spark_default"))
    alerts: AlertSettings = field(default_factory=AlertSettings)
    #: Spark settings for submit mode, and session settings for connect mode ("k=v,k=v" in
    #: CKPT_SPARK_CONF), e.g. the shuffle partitions of a small cluster; a cluster's own
    #: defaults stand otherwise
    spark_conf: tuple[tuple[str, str], ...] = field(default_factory=lambda: tuple(
        (k, v) for k, _, v in (kv.partition("=") for kv in
                               os.environ.get("CKPT_SPARK_CONF", "").split(",") if "=" in kv)))
    spark_connect_conn_id: str = field(default_factory=lambda: os.environ.get(
        "CKPT_SPARK_CONNECT_CONN_ID", "spark_connect_default"))
    #: what one data day of input is, as keys under ``data`` with a ``{data_day}``
    #: (YYYY-MM-DD) placeholder, e.g. ``raw/flights/{data_day}.csv``: a backfill's preview
    #: names the days whose input is missing
    daily_inputs: tuple[str, ...] = ()
    #: the DAG these settings checkpoint, set by ``checkpoint_dag``: the ``dag_id`` tag of
    #: the metrics its steps emit
    dag_id: str | None = None

    def __post_init__(self) -> None:
        if self.storage != self.storage.strip():
            raise ValueError(f"pipeline {self.pipeline_id!r}: checkpoint storage "
                             f"{self.storage!r} has surrounding white space (CKPT_STORAGE)")
        for name, uri in (("storage", self.storage), ("data", self.data),
                          ("endpoint_url", self.endpoint_url or "")):
            parsed = urlparse(uri.strip())
            if parsed.username or parsed.password:
                # A URI is shown and stored everywhere a location is (the serialized DAG,
                # lineage namespaces, log lines); a credential belongs in a connection.
                raise ValueError(f"pipeline {self.pipeline_id!r}: credentials in the {name} "
                                 "URI; give them as an Airflow connection (aws_conn_id) or "
                                 "the AWS credential chain")
        validate_templates(self.daily_inputs, "daily input")
        if self.spark_mode not in SPARK_MODES:
            raise ValueError(f"spark_mode must be one of {', '.join(SPARK_MODES)}, "
                             f"not {self.spark_mode!r}")

    @property
    def roots(self) -> tuple[str, ...]:
        """Where checkpoint storage and the data live: what a task's failure line must not
        show (:func:`checkpointing.redaction.redact`)."""
        return tuple(r for r in (self.storage, self.data) if r.strip())

    def to_kwargs(self) -> dict[str, Any]:
        """JSON-safe form for what Airflow stores (the begin step's serialized settings,
        triggers' kwargs): connection ids, never secrets. ``spark_conf`` stays out: it may
        hold a credential (``spark.hadoop.fs.s3a.secret.key``), and only the tasks that
        start Spark need it, which have the DAG's own settings."""
        return {"pipeline_id": self.pipeline_id, "storage": self.storage, "data": self.data,
                "endpoint_url": self.endpoint_url, "aws_conn_id": self.aws_conn_id,
                "config": self.config.to_json(), "spark_mode": self.spark_mode,
                "spark_conn_id": self.spark_conn_id, "alerts": self.alerts.to_kwargs(),
                "spark_connect_conn_id": self.spark_connect_conn_id,
                "daily_inputs": list(self.daily_inputs), "dag_id": self.dag_id}

    @classmethod
    def from_kwargs(cls, d: dict[str, Any]) -> CheckpointSettings:
        return cls(d["pipeline_id"], d.get("storage") or "", d.get("data") or "",
                   d.get("endpoint_url"), d.get("aws_conn_id"),
                   CheckpointConfig.from_json(d.get("config") or {}),
                   d.get("spark_mode") or "local", d.get("spark_conn_id") or "spark_default",
                   AlertSettings.from_kwargs(d.get("alerts") or {}),
                   tuple(tuple(kv) for kv in d.get("spark_conf") or ()),
                   d.get("spark_connect_conn_id") or "spark_connect_default",
                   tuple(d.get("daily_inputs") or ()), d.get("dag_id"))


def metrics_enabled() -> bool:
    """Whether Airflow's metrics are on (StatsD, DogStatsD or OpenTelemetry): only then does
    a coordinator get the metrics listener, so that with Airflow's defaults no task reads
    or sends anything for metrics."""
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # pragma: no cover - outside Airflow
        return False
    return any(conf.getboolean("metrics", key, fallback=False)
               for key in ("statsd_on", "statsd_datadog_enabled", "otel_on"))
