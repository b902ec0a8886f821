"""The Spark session a job runs in, and how storage URIs look to Spark.

Local defaults (``local[2]``, few shuffle partitions, no UI) apply only where the runtime
creates the session itself; under spark-submit the cluster's settings stand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from checkpointing.extras import require

from .metastore_schema import ensure_schema_once
from .spark_conf import (
    LOCAL_CONF,
    LOG4J_CONF,
    SESSION_CONF,
    lakehouse_conf,
    metastore_conf,
    s3a_conf,
    spark_jars,
)


def spark_uri(uri: str) -> str:
    """Storage URIs as Spark (Hadoop) reads them: s3:// goes through the s3a connector, and
    file:// URIs lose their percent-encoding (Hadoop takes a path string literally, so
    ``part%3D1`` would not name the ``part=1`` directory Spark wrote)."""
    if uri.startswith("s3://"):
        return "s3a://" + uri[len("s3://"):]
    if uri.startswith("file://"):
        return "file://" + unquote(uri[len("file://"):])
    return uri


def spark_session(app: str, master: str | None = None, *, s3: bool = False,
                  endpoint_url: str | None = None, conf: dict[str, str] | None = None,
                  remote: str | None = None) -> Any:
    """A SparkSession for local mode, under spark-submit (which sets the master), or, with
    ``remote`` (``sc://host:port``), a Spark Connect session on that server.

    With ``s3``, the S3A connector jars from scripts/install_spark_s3.sh (or
    CKPT_SPARK_JARS) are put on the classpath and S3A is configured for ``endpoint_url``.
    ``conf`` adds Spark settings (e.g. ``spark.sql.shuffle.partitions`` for a small cluster).
    """
    if remote:
        from .connect import connect_session

        return connect_session(remote, app, s3=s3, endpoint_url=endpoint_url, conf=conf)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # py4j, the bridge to the JVM, comes with full pyspark only (not pyspark-client)
    require("py4j.java_gateway", "spark", "a local or spark-submit Spark session")
    from pyspark.sql import SparkSession

    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # set by spark-submit
    b = SparkSession.builder.appName(app)
    for k, v in SESSION_CONF.items():
        b = b.config(k, v)
    if not submitted and (master is None or master.startswith("local")):
        # A laptop-sized local session: the cluster's own settings stand everywhere else.
        b = b.master(master or "local[2]")
        for k, v in LOCAL_CONF.items():
            b = b.config(k, v)
        b = (b.config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false"))
    elif master:
        b = b.master(master)
    listed = os.environ.get("CKPT_SPARK_JARS")
    found = [Path(j) for j in listed.split(",") if j] if listed else spark_jars()
    # Delta Lake's runtime in every session; the S3A jars (the AWS SDK's bundle is half a
    # gigabyte) only in one that reaches S3.
    jars = [j for j in found if s3 or not _is_s3a(j)]
    if s3 and not any(j.name.startswith("hadoop-aws") for j in jars):
        raise RuntimeError("s3a:// needs hadoop-aws: run scripts/install_spark_s3.sh "
                           "or set CKPT_SPARK_JARS")
    if jars:
        b = b.config("spark.jars", ",".join(str(j) for j in jars))
    # A session that is the first to use a fresh PostgreSQL metastore would deadlock on
    # its first CREATE TABLE (metastore_schema): its tables are created before it opens.
    ensure_schema_once()
    for k, v in {**lakehouse_conf(jars), **metastore_conf()}.items():
        b = b.config(k, v)
    if s3:
        for k, v in s3a_conf(endpoint_url).items():
            b = b.config(k, v)
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    if not submitted:
        # This process launches the driver JVM: its log lines go to stdout at their level.
        b = b.config("spark.driver.extraJavaOptions",
                     f"-Dlog4j.configurationFile={LOG4J_CONF} -Dlog4j2.level=WARN")
    return b.getOrCreate()


def _is_s3a(jar: Path) -> bool:
    """One of the S3A connector's jars (hadoop-aws, the AWS SDK, its analytics layer)."""
    return jar.name.startswith(("hadoop-aws", "bundle-", "analyticsaccelerator-"))
