"""Spark Connect sessions: the driver lives in a long-running Spark Connect server and the
task process holds a thin gRPC client (no JVM of its own).

Jobs run unchanged as long as they use the DataFrame API: Spark Connect has no
``sparkContext``, RDDs or JVM access, and :func:`unsupported_feature` turns the error a job
meets there into one line that says so. Static settings (jars, the S3A connector and its
credentials) belong to the server (scripts/spark_connect.py starts one); this module sets
only session settings, including the S3A endpoint, which Hadoop reads per session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Any
from urllib.parse import urlparse

from checkpointing.extras import require

from .reattach import quiet_closed_session_noise
from .spark_conf import SESSION_CONF, s3a_conf

log = logging.getLogger("spark_jobs.runtime.connect")


class SparkConnectError(RuntimeError):
    """The Spark Connect server cannot be used: unreachable, not a Connect server, or of an
    incompatible version. The message is one line naming the endpoint."""


def endpoint(url: str) -> tuple[str, int]:
    """(host, port) of a ``sc://host:port/;params`` URL (port 15002 when omitted)."""
    parsed = urlparse(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise SparkConnectError(f"{url!r} is not a Spark Connect URL (sc://host:port)")
    return parsed.hostname, parsed.port or 15002


def redacted(url: str) -> str:
    """The URL without its parameters (``;token=...`` is a secret)."""
    host, port = endpoint(url)
    return f"sc://{host}:{port}"


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail in seconds, naming the endpoint, when nothing accepts connections there (the
    Connect client itself retries for about ten minutes before it gives up)."""
    host, port = endpoint(url)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise SparkConnectError(
            f"Spark Connect server {redacted(url)} is unreachable ({exc.strerror or exc}); "
            "start one with scripts/spark_connect.py start, or fix the spark_connect "
            "connection") from None


def check_versions(client: str, server: str, url: str) -> None:
    """Refuse a server of another major version than the client; warn on another minor
    (Spark Connect's protocol is meant to span minor versions, not major ones)."""
    if client.split(".")[0] != server.split(".")[0]:
        raise SparkConnectError(
            f"Spark Connect server {redacted(url)} runs Spark {server}, this client is pyspark "
            f"{client}: install pyspark {server.rsplit('.', 1)[0]}.* or use a {client} server")
    if client.split(".")[:2] != server.split(".")[:2]:
        log.warning("Spark Connect server %s runs Spark %s, this client is pyspark %s",
                    redacted(url), server, client)


def connect_session(url: str, app: str, *, s3: bool = False, endpoint_url: str | None = None,
                    conf: dict[str, str] | None = None, probe_timeout: float = 5.0) -> Any:
    """A Spark Connect session on ``url`` with the runtime's session settings.

    The server is probed first with few retries, so that a wrong port or a server that is
    not a Spark Connect server fails in seconds with one line; the session then keeps the
    client's default retries (they ride out a server restart)."""
    require("pyspark.sql.connect.session", "connect", "a Spark Connect session")
    import pyspark
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession

    check_reachable(url, probe_timeout)
    # What pyspark's own builder does for remote sessions: pyspark.sql.functions dispatch on
    # it, so this process's column functions build Connect expressions from now on.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    quiet_closed_session_noise()  # the end of each session, not an error
    spark = SparkSession.builder.remote(url).create()
    defaults = spark.client.get_retry_policies()
    spark.client.set_retry_policies([DefaultPolicy(max_retries=3, max_backoff=1000)])
    try:
        server = spark.version
    except Exception as exc:  # grpc status errors of every kind
        with contextlib.suppress(Exception):
            spark.client.close()  # no session to release: just the channel
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkConnectError(f"{redacted(url)} did not answer as a Spark Connect server: "
                                f"{first[:200]}") from None
    spark.client.set_retry_policies(defaults)
    check_versions(pyspark.__version__, server, url)
    settings = {**SESSION_CONF, "spark.app.name": app}
    if s3:
        # Hadoop settings of the session: Spark copies session settings into the Hadoop
        # configuration its readers and writers use (prefix "spark.hadoop." removed here).
        settings.update({k.removeprefix("spark.hadoop."): v
                         for k, v in s3a_conf(endpoint_url).items()})
    settings.update(conf or {})
    for k, v in settings.items():
        try:
            spark.conf.set(k, v)
        except Exception as exc:
            if "CANNOT_MODIFY_CONFIG" not in str(exc):
                raise
            log.info("%s is a static setting of the Spark Connect server: %s not applied", k, v)
    return spark


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (its writes are the server's)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def unsupported_feature(exc: BaseException) -> str | None:
    """One line for an error a job met because Spark Connect lacks a feature, else None."""
    from pyspark.errors import PySparkAttributeError, PySparkNotImplementedError

    if isinstance(exc, PySparkAttributeError | PySparkNotImplementedError):
        detail = str(exc).strip().splitlines()[0]
        return (f"{detail[:240]} -- Spark Connect runs the DataFrame API only (no "
                "sparkContext, RDDs or JVM access); rewrite that part, or run this job with "
                "spark_mode 'local' or 'submit'")
    return None
