"""The Spark settings the runtime derives: the lakehouse runtimes that match the installed
Spark line, and pyiceberg's catalogs as Spark catalogs of the same name (no JVM: the
settings themselves; tests/integration/test_iceberg_tables.py reads through them)."""

from __future__ import annotations

import logging
from pathlib import Path

from spark_jobs.runtime.spark_conf import (
    ICEBERG_EXTENSIONS,
    for_spark_line,
    iceberg_catalogs_conf,
    is_secret_key,
    lakehouse_conf,
)

JARS = [Path(n) for n in ("delta-spark_4.1_2.13-4.4.0.jar", "delta-storage-4.4.0.jar",
                          "iceberg-spark-runtime-4.1_2.13-1.12.0.jar", "hadoop-aws-3.4.3.jar")]


def test_a_runtime_for_another_spark_line_is_left_out_and_named(caplog):
    caplog.set_level(logging.WARNING)
    assert for_spark_line(JARS, "4.1") == JARS
    kept = for_spark_line(JARS, "4.2")
    assert [j.name for j in kept] == ["delta-storage-4.4.0.jar", "hadoop-aws-3.4.3.jar"]
    warned = [r.getMessage() for r in caplog.records]
    assert any("iceberg-spark-runtime-4.1_2.13-1.12.0.jar is built for Spark 4.1, not the "
               "installed Spark 4.2" in m and "reads no Iceberg table" in m for m in warned)
    assert lakehouse_conf(kept) == {}  # no runtime: no extension, no catalog


def test_pyiceberg_s_catalogs_are_spark_catalogs_of_the_same_name(monkeypatch, tmp_path):
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__URI", f"sqlite:///{tmp_path}/c.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__PG__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__PG__URI",
                       "postgresql+psycopg2://u:p%40ss@db:5433/cat?sslmode=require")
    monkeypatch.setenv("PYICEBERG_CATALOG__PG__WAREHOUSE", "s3://wh/")
    conf = iceberg_catalogs_conf()
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{tmp_path}/c.db"
    assert conf["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert conf["spark.sql.catalog.pg.uri"] == "jdbc:postgresql://db:5433/cat?sslmode=require"
    assert conf["spark.sql.catalog.pg.jdbc.user"] == "u"
    assert conf["spark.sql.catalog.pg.jdbc.password"] == "p@ss"
    assert conf["spark.sql.catalog.pg.warehouse"] == "s3://wh/"
    secret = [k for k in conf if is_secret_key(k)]
    assert secret == ["spark.sql.catalog.pg.jdbc.password"]
    both = lakehouse_conf(JARS)
    assert both["spark.sql.extensions"] == ("io.delta.sql.DeltaSparkSessionExtension,"
                                            f"{ICEBERG_EXTENSIONS}")
    assert both["spark.sql.catalog.pg.type"] == "jdbc"


def test_a_catalog_type_spark_is_not_given_is_named_in_one_warning(monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("PYICEBERG_CATALOG__GLUE__TYPE", "glue")
    assert not any(k.startswith("spark.sql.catalog.glue") for k in iceberg_catalogs_conf())
    assert any("Iceberg catalog 'glue' (type 'glue') is not given to Spark" in r.getMessage()
               for r in caplog.records)
