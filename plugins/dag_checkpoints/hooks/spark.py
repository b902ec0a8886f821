"""Spark through Airflow's connections, for the checkpointed operators: the URL of a Spark
Connect connection, the master of a Spark connection (and whether it answers), a session
of the task process (local or Spark Connect) and a spark-submit of the runtime's entry
point. The Spark provider's hooks read the connections; these add what a checkpointed task
needs around them: one-line errors that name the connection, never a storage path."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from ..shared.settings import CheckpointSettings


def spark_connect_url(conn_id: str) -> str:
    """The ``sc://`` URL of an Airflow connection of the Spark provider's ``spark_connect``
    type (host, port; login is the user id, password the token, extra ``use_ssl``)."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    try:
        return SparkConnectHook(conn_id).get_connection_url()
    except Exception as exc:  # the connection is missing or malformed
        raise AirflowFailException(f"Spark Connect connection {conn_id!r}: {exc}") from None


def spark_master(conn_id: str) -> str:
    """The master URL of an Airflow Spark connection, as SparkSubmitHook reads it."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    host = conn.host or ""
    if "://" in host or conn.conn_type == "spark" and not conn.port:
        master = host or "yarn"
    else:
        master = f"{conn.conn_type}://{host}"
    if conn.port and f":{conn.port}" not in master:
        master = f"{master}:{conn.port}"
    return master


def check_master_reachable(master: str, timeout: float = 5.0) -> None:
    """Fail fast, naming the master, when a ``spark://`` master does not accept connections
    (spark-submit itself retries for a minute and then prints a stack trace)."""
    url = urlparse(master)
    if url.scheme != "spark":
        return
    for hostport in url.netloc.split(","):  # spark://h1:7077,h2:7077 (standby masters)
        host, _, port = hostport.partition(":")
        try:
            socket.create_connection((host, int(port or 7077)), timeout=timeout).close()
            return
        except OSError:
            continue
    raise AirflowException(f"Spark master {master} is unreachable (no answer within "
                           f"{timeout:g}s); check the Spark connection and that the master runs")



def open_session(settings: CheckpointSettings, app: str, remote: str | None = None) -> Any:
    """A Spark session for a task of ``settings``' DAG: the task process's own (local
    mode), or with ``remote`` a client of that Spark Connect server, configured with the
    DAG's ``spark_conf``. A server that does not answer is an AirflowException (a retry
    may find it up)."""
    from spark_jobs.runtime import SparkConnectError, spark_session

    s3 = settings.storage.startswith("s3") or settings.data.startswith("s3")
    try:
        return spark_session(app, s3=s3, endpoint_url=settings.endpoint_url, remote=remote,
                             conf=dict(settings.spark_conf) if remote else None)
    except SparkConnectError as exc:
        raise AirflowException(str(exc)) from None


def remote_url(settings: CheckpointSettings) -> str | None:
    """The Spark Connect URL a task of ``settings``' DAG runs on; None in local mode."""
    if settings.spark_mode != "connect":
        return None
    return spark_connect_url(settings.spark_connect_conn_id)


def submit_hook(settings: CheckpointSettings, name: str, py_files: str,
                args: list[str]) -> Any:
    """The Spark provider's ``SparkSubmitHook`` for one run of the runtime's entry point on
    the master of ``settings.spark_conn_id``, with pyspark's own spark-submit (whatever
    PATH the worker has) and this interpreter on both sides."""
    import pyspark
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    check_master_reachable(spark_master(settings.spark_conn_id))
    return SparkSubmitHook(
        conn_id=settings.spark_conn_id, py_files=py_files, application_args=args,
        name=name, conf=dict(settings.spark_conf),
        spark_binary=str(Path(pyspark.__file__).parent / "bin/spark-submit"),
        env_vars={"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
