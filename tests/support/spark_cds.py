"""A class-data sharing archive of Spark's classes for the suite's JVMs (`make test` builds
it: ``python -m tests.support.spark_cds``).

Every Spark JVM the suite starts (local sessions, Connect servers, spark-submit drivers,
the standalone daemons and their executors) loads and verifies the same ten thousand
classes from pyspark's jars. A dynamic CDS archive (JDK 13+) keeps them parsed and
verified: measured on 2 cores, a local session's JVM spent 10 CPU-s against 20 to start,
run a small query and a Parquet round trip, a Connect server 9 against 14 to start and 4
against 7 for its first query. The suite is short of CPU, not wall time, so this is what
its fixtures share.

The JVM maps the archive only when the class path matches the one it was built with: the
same jars (size and time), and every directory on it empty. Spark puts SPARK_CONF_DIR
first, so the suite's is an empty directory and its JVM options travel in the environment
(:func:`spark_env`) instead of a spark-defaults.conf. Where the archive does not match (a
package test's fresh virtual environment), the JVM starts as it would without it, silently.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CDS_DIR = ROOT / ".tools" / "cds"
#: Spark's configuration directory for the suite: empty, as CDS requires of a directory on
#: the class path.
CONF_DIR = CDS_DIR / "conf"
#: The C1 tier of the JIT alone and the serial collector: two cores run three test modules
#: at once, and the C2 compiler's and parallel GC's threads compete with the other modules'
#: work (about 8 % less CPU on a fault-matrix module, 4 % more wall time alone).
#: Production keeps Spark's defaults.
#: The C1 tier alone reserves 48 MB for compiled code, not the 240 MB of the tiered JIT: a
#: benchmark's Connect server (generated code on, TPC-H's Q21 folded into a few large
#: queries) filled it and died of "Out of space in CodeCache", so the default size stays.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
#: Spark compiles the Java it generates for each query shape with Janino, and a literal of a
#: number or date is part of the code: the fault matrix's Connect server spent 40 % of its
#: CPU generating and compiling code (a JFR profile). Past 100 shapes (the default) the
#: cache evicts, and the epochs' repeated queries compile again: with 5,000 entries the
#: process-fault matrix's server took 386 CPU-s against 441.
CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries=5000"
#: Spark's interpreted evaluation instead of generated code (whole-stage code generation off,
#: and the expression factories' ``NO_CODEGEN`` mode, which Spark's own suites run too): the
#: suite's queries are many and their data tiny, so compiling each shape costs more than
#: running it. Alone, the process-fault matrix took 224 machine CPU-s against 360 (its
#: Connect server compiled the most), the local-Spark jobs module 340 against 401. The
#: benchmarks, `make bench-check` among them, and production keep Spark's default.
INTERPRETED = ("-Dspark.sql.codegen.wholeStage=false "
               "-Dspark.sql.codegen.factoryMode=NO_CODEGEN")
#: Delta's snapshot state in two partitions on every JVM of the suite, the standalone
#: cluster's and spark-submit's too (a local session and a local Connect server get it from
#: the runtime's laptop settings, ``LOCAL_CONF``): the suite's tables are a few kilobytes,
#: and Delta's default of 50 partitions made every version read 50 tasks.
SMALL_TABLES = "-Dspark.databricks.delta.snapshotPartitions=2"
#: A mismatched archive is not an error: the JVM then loads its classes as usual, and with
#: these log tags off no test sees a warning on stderr.
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def _spark_jars() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent) / "jars"


@functools.cache
def archive_path() -> Path:
    """Where the archive of this Spark and this JVM is: a new pyspark or JDK (or jars
    reinstalled: the JVM compares their sizes and times) builds anew. Once per process."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    jars = _spark_jars()
    key = hashlib.sha256((java + str(jars) + "".join(
        f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
        for p in sorted(jars.glob("*.jar")))).encode())
    return CDS_DIR / f"spark-{key.hexdigest()[:16]}.jsa"


def spark_env() -> dict[str, str]:
    """The environment that gives the suite's Spark JVMs their options (and the archive,
    once built)."""
    CONF_DIR.mkdir(parents=True, exist_ok=True)
    opts = JVM_OPTS
    try:
        archive = archive_path()
    except (OSError, ImportError):  # no JVM or no pyspark here (the unit tier needs neither)
        archive = None
    if archive is not None and archive.exists():
        opts += f" -XX:SharedArchiveFile={archive} {QUIET}"
    return {"SPARK_CONF_DIR": str(CONF_DIR),
            # spark-submit's JVMs (the launcher adds SPARK_SUBMIT_OPTS to the driver's
            # options); their executors get the same through SparkConf's system properties
            "SPARK_SUBMIT_OPTS": f"{opts} -Dspark.executor.defaultJavaOptions='{opts}' "
                                 f"-D{CODEGEN_CACHE} {INTERPRETED} {SMALL_TABLES}",
            # the standalone master and worker
            "SPARK_DAEMON_JAVA_OPTS": opts}


def build() -> Path:
    """Run a Connect server through a small workload of what the suite does (SQL, joins,
    aggregates, Parquet, Arrow batches, a Python UDF) and archive the classes it loaded
    when it exits."""
    archive = archive_path()
    if archive.exists():
        return archive
    CONF_DIR.mkdir(parents=True, exist_ok=True)
    for old in CDS_DIR.glob("spark-*.jsa"):
        old.unlink()
    from spark_jobs.runtime.connect_server import ConnectServer

    partial = archive.with_suffix(".partial")
    env = {"SPARK_CONF_DIR": str(CONF_DIR),
           # the suite's mode: the interpreted evaluators' classes go into the archive
           "SPARK_SUBMIT_OPTS": f"{JVM_OPTS} {INTERPRETED} "
                                f"-XX:ArchiveClassesAtExit={partial}"}
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="ckpt-cds-") as tmp:
        server = ConnectServer(port=0, driver_memory="1g",  # a free port, race-proof
                               log_path=Path(tmp) / "server.log",
                               warehouse=Path(tmp) / "warehouse", extra_env=env)
        server.start()
        try:
            _workload(server.url, Path(tmp))
        finally:
            # SIGTERM: the JVM exits normally and writes the archive (200 MB, which takes
            # seconds; not killed meanwhile)
            server.stop(timeout=300)
    if not partial.exists():
        raise RuntimeError(f"the JVM wrote no CDS archive at {partial}")
    partial.rename(archive)
    return archive


def _workload(url: str, tmp: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from spark_jobs.runtime import spark_session

    spark = spark_session("cds", remote=url)
    try:
        df = spark.range(50_000).select(
            (F.col("id") % 97).alias("k"), F.col("id").cast("decimal(18,2)").alias("v"),
            F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % 30).cast("int"))
            .cast("string").alias("day"))
        df.write.partitionBy("day").parquet(str(tmp / "p"))
        back = spark.read.parquet(str(tmp / "p"))
        dims = spark.createDataFrame([(i, f"n{i}") for i in range(97)], "k long, name string")
        joined = back.join(F.broadcast(dims), "k").join(back.select("k", "day").distinct(),
                           ["k", "day"], "left_anti")
        joined.groupBy("name").agg(F.sum("v"), F.count("*")).orderBy("name").collect()
        w = Window.partitionBy("k").orderBy(F.desc("v"))
        back.withColumn("r", F.row_number().over(w)).where("r = 1").toPandas()
        back.repartition(3, "day").sortWithinPartitions("k").write.mode("overwrite") \
            .json(str(tmp / "j"))
        upper = F.udf(lambda s: s.upper(), "string")
        dims.select(upper("name")).collect()
    finally:
        spark.stop()


if __name__ == "__main__":
    print(build())
