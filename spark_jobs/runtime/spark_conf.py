"""The Spark settings the runtime sets, shared by local, spark-submit and Connect sessions
and by the Connect server it starts."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

#: Session settings every job relies on, in every mode (UTC dates; partition values stay
#: strings, as the state handles record them).
SESSION_CONF = {"spark.sql.session.timeZone": "UTC",
                "spark.sql.sources.partitionColumnTypeInference.enabled": "false"}

#: Files per staged output, set only on the laptop-sized local sessions the runtime makes
#: (tiny outputs in one file); on a cluster Spark writes a file per partition, in parallel.
OUTPUT_FILES_CONF = "spark.ckpt.outputFiles"
#: Delta's reader rebuilds a table version's state (its log replayed into the live files)
#: in 50 partitions by default, a cluster's number: on a laptop's two cores that is 50
#: tasks for a log of a few kilobytes, every time a version is read. With 2, the Delta
#: histories property spent 61 machine CPU-s against 160 (docs/testing.md).
DELTA_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
LOCAL_CONF = {"spark.sql.shuffle.partitions": "4", OUTPUT_FILES_CONF: "1",
              DELTA_SNAPSHOT_PARTITIONS: "2"}

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
    """The jars every Spark the project starts puts on its class path (S3A, the lakehouse
    runtimes, JDBC drivers), less a runtime built for another Spark line than the one
    installed (:func:`for_spark_line`)."""
    return for_spark_line(sorted(JARS_DIR.glob("*.jar")), installed_spark_line())


#: a lakehouse runtime's jar names the Spark line it is built for
_RUNTIME_LINE = re.compile(r"^(delta-spark|iceberg-spark-runtime)[_-](\d+\.\d+)_\d+\.\d+-")


def installed_spark_line() -> str | None:
    """The installed Spark's ``major.minor`` (pyspark's, or the Connect client's)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("pyspark", "pyspark-client"):
        try:
            return ".".join(version(dist).split(".")[:2])
        except PackageNotFoundError:
            continue
    return None


def for_spark_line(jars: list[Path], line: str | None) -> list[Path]:
    """``jars`` without the lakehouse runtimes built for another Spark line than ``line``
    (Iceberg's runtime for 4.1 fails to load in Spark 4.2): each left out is named in one
    warning, and its format's tables are then not readable through Spark."""
    if line is None:
        return jars
    kept = []
    for jar in jars:
        m = _RUNTIME_LINE.match(jar.name)
        if m and m.group(2) != line:
            log.warning("%s is built for Spark %s, not the installed Spark %s: left out, so "
                        "Spark reads no %s table; install the runtime for Spark %s where "
                        "one is published", jar.name, m.group(2), line,
                        "Delta" if m.group(1) == "delta-spark" else "Iceberg", line)
            continue
        kept.append(jar)
    return kept


#: Iceberg's Spark runtime (its jar in ``JARS_DIR``): the session extensions behind Iceberg's
#: SQL in Spark (``CALL`` procedures, ``MERGE``/``UPDATE``/``DELETE`` on Iceberg tables,
#: ``ALTER TABLE ... WRITE ORDERED BY``). Static, like Delta's.
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
_SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
#: Spark redacts configuration keys that match this in its UI, logs and ``SET`` output
#: (spark.redaction.regex); the Connect server also keeps them off its command line.
SECRET_KEY_WORDS = ("password", "secret", "token", "credential")

log = logging.getLogger(__name__)


def lakehouse_conf(jars: list[Path]) -> dict[str, str]:
    """The table formats' session settings for a Spark with ``jars``: Delta's extension and
    session catalog when its runtime is among them; Iceberg's extensions and, for every
    Iceberg catalog pyiceberg is configured with (``PYICEBERG_CATALOG__<NAME>__*`` or
    ``.pyiceberg.yaml``), a Spark catalog of the same name over the same database
    (:func:`iceberg_catalogs_conf`), when Iceberg's runtime is. A format whose runtime is
    absent gets nothing: such a session reads none of its tables."""
    names = [j.name for j in jars]
    conf: dict[str, str] = {}
    extensions = []
    if any(n.startswith("delta-spark_") for n in names):
        conf.update(DELTA_CONF)
        extensions.append(DELTA_CONF["spark.sql.extensions"])
    if any(n.startswith("iceberg-spark-runtime-") for n in names):
        extensions.append(ICEBERG_EXTENSIONS)
        conf.update(iceberg_catalogs_conf())
    if extensions:
        conf["spark.sql.extensions"] = ",".join(extensions)
    return conf


def iceberg_catalogs_conf() -> dict[str, str]:
    """Spark settings naming each of pyiceberg's configured catalogs in Spark under the same
    name, so that the committer (pyiceberg) and Spark share one catalog: what an epoch
    commits, ``spark.table("<name>.db.t")`` reads, ``VERSION AS OF`` its snapshot.

    A SQL catalog (``type: sql``) becomes Iceberg's JDBC catalog over the same database (the
    two keep the same tables, ``iceberg_tables`` and ``iceberg_namespace_properties``, and
    the catalog's name is the key of its rows): SQLite by its file, PostgreSQL by host and
    database, with the user and password as the JDBC catalog's own properties. A REST or
    Hive catalog keeps its URI. Another type is left for the deployment to configure
    (``spark.sql.catalog.<name>``), said in one warning. Nothing without pyiceberg."""
    try:
        from pyiceberg.utils.config import Config
    except ImportError:
        return {}
    catalogs = Config().config.get("catalog") or {}
    conf: dict[str, str] = {}
    for name, props in catalogs.items():
        if not isinstance(props, dict):
            continue
        kind = str(props.get("type", "rest" if "uri" in props else "")).lower()
        uri = str(props.get("uri", ""))
        prefix = f"spark.sql.catalog.{name}"
        own: dict[str, str] = {}
        if kind == "sql" and uri:
            own = _jdbc_catalog(uri)
        elif kind in ("rest", "hive") and uri:
            own = {"type": kind, "uri": uri}
            for key in ("credential", "token"):
                if props.get(key):
                    own[key] = str(props[key])
        if not own:
            log.warning("Iceberg catalog %r (type %r) is not given to Spark: set "
                        "spark.sql.catalog.%s in the deployment's Spark configuration",
                        name, kind or "unknown", name)
            continue
        # Iceberg's JDBC catalog refuses to start without a warehouse, where pyiceberg
        # needs none (every table the project commits has its own location): a table
        # Spark creates without a location then goes where Spark's own tables go.
        own["warehouse"] = str(props.get("warehouse")
                               or Path("spark-warehouse", "iceberg", name).resolve().as_uri())
        conf[prefix] = _SPARK_CATALOG
        conf.update({f"{prefix}.{k}": v for k, v in own.items()})
    return conf


#: the catalog tables' layout pyiceberg's SQL catalog writes (with ``iceberg_type``): a
#: database Spark creates first is then one pyiceberg reads without falling back to v0
_JDBC_V1 = {"jdbc.schema-version": "V1"}


def _jdbc_catalog(uri: str) -> dict[str, str]:
    """Iceberg's JDBC catalog properties for pyiceberg's SQLAlchemy URL ``uri`` (SQLite or
    PostgreSQL; another database: none)."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    backend = url.get_backend_name()
    if backend == "sqlite" and url.database:
        # Absolute: a Connect server does not run in this process's directory.
        return {"type": "jdbc", "uri": f"jdbc:sqlite:{Path(url.database).resolve()}",
                **_JDBC_V1}
    if backend == "postgresql" and url.database:
        host = url.host or "localhost"
        port = f":{url.port}" if url.port else ""
        query = "&".join(f"{k}={v}" for k, v in url.query.items() if isinstance(v, str))
        own = {"type": "jdbc",
               "uri": f"jdbc:postgresql://{host}{port}/{url.database}"
                      + (f"?{query}" if query else ""), **_JDBC_V1}
        if url.username:
            own["jdbc.user"] = url.username
        if url.password:
            own["jdbc.password"] = str(url.password)
        return own
    return {}


def is_secret_key(key: str) -> bool:
    """A configuration key whose value must not show in a process listing or a log."""
    return any(w in key.lower() for w in SECRET_KEY_WORDS)


def s3a_conf(endpoint_url: str | None) -> dict[str, str]:
    """Hadoop S3A settings. Credentials come from the standard AWS chain (environment,
    profile, instance role): nothing secret is put in the Spark configuration."""
    conf = {"spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            # pyiceberg writes s3:// locations into Iceberg's metadata, which Spark's
            # Iceberg reads through Hadoop's file systems: the same connector for both.
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
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
