"""The Spark settings the runtime sets, shared by local, spark-submit and Connect sessions
and by the Connect server it starts."""

from __future__ import annotations

import os
from pathlib import Path

#: Session settings every job relies on, in every mode (UTC dates; partition values stay
#: strings, as the state handles record them).
SESSION_CONF = {"spark.sql.session.timeZone": "UTC",
                "spark.sql.sources.partitionColumnTypeInference.enabled": "false"}

#: Files per staged output, set only on the laptop-sized local sessions the runtime makes
#: (tiny outputs in one file); on a cluster Spark writes a file per partition, in parallel.
OUTPUT_FILES_CONF = "spark.ckpt.outputFiles"
LOCAL_CONF = {"spark.sql.shuffle.partitions": "4", OUTPUT_FILES_CONF: "1"}

#: A Connect server's own settings (static: set when it starts). It runs the same
#: pipelines' queries epoch after epoch, and Spark keeps the classes it generates for a
#: query's shape in a cache of 100 by default: fewer than ``tpch_daily``'s about 140
#: shapes, so every epoch generated, compiled and JIT-compiled 50 to 100 of them again
#: (Spark's CodeGenerator metrics; none after the first epochs with 5,000). The figures are in
#: docs/performance.md, "Generated code kept".
SERVER_CONF = {"spark.sql.codegen.cache.maxEntries": "5000"}

#: The S3A jars (scripts/install_spark_s3.sh): the clone's .tools/jars, or where an image
#: or a deployment put them (CKPT_SPARK_JARS_DIR; an installed package has no clone).
JARS_DIR = Path(os.environ.get("CKPT_SPARK_JARS_DIR")
                or Path(__file__).resolve().parents[2] / ".tools" / "jars")
LOG4J_CONF = Path(__file__).resolve().parent / "log4j2.properties"

#: Delta Lake's Spark runtime (its jar in ``JARS_DIR``): the session extension and the
#: catalog that let a job ``spark.read.format("delta")``, ``DESCRIBE HISTORY``, read
#: ``VERSION AS OF`` and name tables in Spark's session catalog. Static: set when the
#: session (local, spark-submit) or the Connect server starts.
DELTA_CONF = {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
              "spark.sql.catalog.spark_catalog":
                  "org.apache.spark.sql.delta.catalog.DeltaCatalog"}


#: The session catalog's metastore: a JDBC URL (embedded Derby, ``jdbc:derby:;databaseName=
#: /var/lib/ckpt/metastore;create=true``, or PostgreSQL, ``jdbc:postgresql://host/db``) with
#: its user and password in CKPT_METASTORE_USER and CKPT_METASTORE_PASSWORD. Unset: Spark's
#: in-memory catalog, which forgets a table's name when the session ends.
METASTORE_ENV = "CKPT_METASTORE_URL"
_JDBC_DRIVERS = {"derby": "org.apache.derby.jdbc.EmbeddedDriver",
                 "postgresql": "org.postgresql.Driver"}


def metastore_conf(url: str | None = None) -> dict[str, str]:
    """Settings that make Spark's session catalog (Hive's metastore, over ``url`` or
    CKPT_METASTORE_URL) persistent and shared: a table a Delta output registers under its
    name (:mod:`spark_jobs.runtime.catalog`) is found by every session configured the
    same way. Static: set when the session or the Connect server starts. Empty without a
    URL. The schema is created on first use."""
    url = url or os.environ.get(METASTORE_ENV)
    if not url:
        return {}
    kind = url.split(":", 2)[1] if url.startswith("jdbc:") else ""
    if kind not in _JDBC_DRIVERS:
        raise ValueError(f"{METASTORE_ENV} must be a jdbc:derby: or jdbc:postgresql: URL, not "
                         f"{url.split(':', 2)[:2]!r}")
    conf = {"spark.sql.catalogImplementation": "hive",
            "spark.hadoop.javax.jdo.option.ConnectionURL": url,
            "spark.hadoop.javax.jdo.option.ConnectionDriverName": _JDBC_DRIVERS[kind],
            "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
            "spark.hadoop.hive.metastore.schema.verification": "false"}
    if kind == "postgresql":
        # Hive's metastore client finds its JDBC driver through the JVM's own class path:
        # on spark.jars (a class loader of the application's) DriverManager sees no driver.
        driver = [str(j) for j in spark_jars() if j.name.startswith("postgresql-")]
        if driver:
            conf["spark.driver.extraClassPath"] = driver[0]
    for env, key in (("CKPT_METASTORE_USER", "ConnectionUserName"),
                     ("CKPT_METASTORE_PASSWORD", "ConnectionPassword")):
        if os.environ.get(env):
            conf[f"spark.hadoop.javax.jdo.option.{key}"] = os.environ[env]
    return conf


def spark_jars() -> list[Path]:
    """The jars every Spark the project starts puts on its class path (S3A, Delta)."""
    return sorted(JARS_DIR.glob("*.jar"))


def lakehouse_conf(jars: list[Path]) -> dict[str, str]:
    """The table formats' session settings for a Spark with ``jars``: Delta's when its
    runtime is among them (else none: a session without it reads no Delta table)."""
    return dict(DELTA_CONF) if any(j.name.startswith("delta-spark_") for j in jars) else {}


def s3a_conf(endpoint_url: str | None) -> dict[str, str]:
    """Hadoop S3A settings. Credentials come from the standard AWS chain (environment,
    profile, instance role): nothing secret is put in the Spark configuration."""
    conf = {"spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.endpoint.region": os.environ.get("AWS_DEFAULT_REGION",
                                                                  "us-east-1"),
            # S3 verifies and stores each file's SHA-256 at upload: a snapshot reads it with
            # one HEAD instead of downloading the file to the driver to hash it.
            "spark.hadoop.fs.s3a.create.checksum.algorithm": "SHA256",
            # Every write goes to a directory of its own attempt, listed only once the write
            # succeeded (PROTOCOL, section 4), so the job-level rename of the v1 committer buys
            # nothing: v2 moves each task's files once (a rename on S3 is a copy and a
            # delete), and no _SUCCESS marker is put. On MinIO a tpch_daily epoch made
            # about 15 % fewer requests.
            "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2",
            "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
            # Spark creates each file under a fresh task directory, never over a directory
            # nor below a file: S3A's checks for those (a LIST and HEADs per file and per
            # mkdir) buy nothing. tpch_daily's daily epoch on MinIO made 11 % fewer
            # requests (713 -> 637, medians) and took 3 % less time (4.33 -> 4.18 s),
            # alternating with the checks on in one run.
            "spark.hadoop.fs.s3a.performance.flags": "create,mkdir"}
    if endpoint_url:
        conf.update({"spark.hadoop.fs.s3a.endpoint": endpoint_url,
                     "spark.hadoop.fs.s3a.path.style.access": "true",
                     "spark.hadoop.fs.s3a.connection.ssl.enabled":
                         str(endpoint_url.startswith("https")).lower()})
    return conf
