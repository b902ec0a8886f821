"""Spark's own lakehouse: every Spark the project starts carries Delta Lake's Spark runtime
(the Connect server here; local and spark-submit sessions the same way). A job reads Delta
tables through Spark; a Delta output registered under a catalog name is found by that name
from a Spark that never wrote it, every version the project commits, read by Spark's Delta
reader at that version, equal to delta-rs's read of it, one version per epoch in
``DESCRIBE HISTORY``; a checkpointed pipeline over a table Spark writes with deletion
vectors survives a kill exactly once; a reader feature table inputs do not read is refused
in one line, naming it. (Histories of Spark-written tables, drawn and named:
tests/integration/test_delta_histories.py.)"""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import DeltaTable

from checkpointing import Coordinator, LocalStorage
from checkpointing.protocol.barrier import plan_from_edges
from checkpointing.protocol.table_inputs import TableInput, TableInputError
from checkpointing.tables.changes import changes, pin
from checkpointing.tables.spec import TableSpec
from spark_jobs.runtime import JobResult, Pipeline, drive_epoch


@pytest.fixture(scope="module")
def spark(spark_connect):
    from spark_jobs.runtime import spark_session

    session = spark_session("lakehouse", remote=spark_connect.url)
    yield session
    session.stop()


SUMS = "key string, total long, n long"


def _sums_pipeline(upstream: str | TableInput, out: TableSpec, fail: dict,
                   value: str = "value") -> Pipeline:
    """key -> (sum of value, rows) over the upstream's content, kept as state from
    ``run.table_changes``; ``fail["once"]`` kills the attempt after its state is written."""
    from checkpointing.protocol.table_inputs import TableInput as Input

    def job(run):
        from pyspark.sql import functions as F

        ch = run.table_changes("src")
        state = run.read_parquet(run.files(run.previous, "sums/"), SUMS)
        delta = ch.signed().groupBy("key").agg(
            (F.sum(F.col(value) * F.col("_sign"))).alias("total"), F.sum("_sign").alias("n"))
        new = (state.unionByName(delta).groupBy("key")
               .agg(F.sum("total").alias("total"), F.sum("n").alias("n")).where("n != 0"))
        run.write_state(new, "sums")
        if fail.pop("once", False):
            raise RuntimeError("killed after its state was written")
        run.write_table(run.read_parquet(run.writer.files("sums/"), SUMS), "sums", out)
        return JobResult()

    return Pipeline({"agg": []}, {"agg": job},
                    plan_from_edges({"agg": []}, {"agg"}, {"agg": {"src": upstream if isinstance(
                        upstream, Input) else Input(upstream)}}))


def test_a_pipeline_over_a_spark_written_table_survives_a_kill_exactly_once(spark, tmp_path):
    """A checkpointed pipeline over a table Spark writes with deletion vectors: two commits
    between epochs, an epoch with no change, and an attempt killed between its snapshot and
    its acknowledgement while the upstream deletes more rows before the retry. After every
    epoch the published aggregate equals Spark's own aggregate of the upstream at the
    version the barrier pinned."""
    path = f"{tmp_path}/bronze/orders"
    t = f"delta.`{path}`"
    out = TableSpec(f"file://{tmp_path}/gold/sums", "overwrite")
    fail: dict = {}
    pipe = _sums_pipeline(f"file://{path}", out, fail)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "sums")
    spark.sql(f"CREATE TABLE {t} (key STRING, value BIGINT) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO {t} SELECT CAST(id % 13 AS STRING), id FROM range(0, 2000, 1, 4)")

    def check(epoch: int) -> None:
        from pyspark.sql import functions as F

        pinned = c.barrier(epoch).table_version("src").version
        want = spark.read.format("delta").option("versionAsOf", pinned).load(path) \
            .groupBy("key").agg(F.sum("value").alias("total"), F.count("*").alias("n"))
        got = DeltaTable(f"{tmp_path}/gold/sums").to_pandas()
        assert sorted((r.key, int(r.total), int(r.n)) for r in got.itertuples()) == \
            sorted((r.key, int(r.total), int(r.n)) for r in want.collect()), epoch

    steps = [
        [],
        [f"DELETE FROM {t} WHERE value % 7 = 0", f"UPDATE {t} SET value = value + 1 "
         "WHERE key = '3'"],  # two commits, deletion vectors
        [],  # no change
        [f"MERGE INTO {t} USING (SELECT CAST(id % 13 AS STRING) AS key, id AS value FROM "
         f"range(1990, 2010)) s ON {t}.value = s.value WHEN MATCHED THEN DELETE "
         "WHEN NOT MATCHED THEN INSERT *"],
    ]
    for i, statements in enumerate(steps):
        for sql in statements:
            spark.sql(sql)
        epoch, meta = drive_epoch(pipe, c, spark, "", f"r{i}")
        assert meta is not None and meta.completed, meta
        check(epoch)
    # A kill between the snapshot and the acknowledgement; the upstream moves before the
    # retry, which reads the same pinned change.
    spark.sql(f"DELETE FROM {t} WHERE key = '5'")
    fail["once"] = True
    with pytest.raises(RuntimeError, match="killed"):
        drive_epoch(pipe, c, spark, "", "killed")
    epoch = c.open_epoch_for_run("killed").epoch_id
    spark.sql(f"DELETE FROM {t} WHERE key = '6'")
    again, meta = drive_epoch(pipe, c, spark, "", "killed", attempt=2)
    assert again == epoch and meta is not None and meta.completed
    check(epoch)
    epoch, meta = drive_epoch(pipe, c, spark, "", "after")  # reads the later delete once
    assert meta is not None and meta.completed
    check(epoch)


def test_what_table_inputs_do_not_read_is_refused_in_one_line(spark, tmp_path):
    """A reader feature table inputs do not know (type widening here) is refused naming
    it, while Spark itself reads the table."""
    path = f"{tmp_path}/bronze/widened"
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT) USING delta "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1), (2)")
    spec = TableInput(f"file://{path}")
    with pytest.raises(TableInputError, match="typeWidening") as refused:
        changes(spec, None, pin(spec))
    assert "\n" not in str(refused.value) and path not in str(refused.value)
    assert spark.read.format("delta").load(path).count() == 2


def test_a_snapshot_read_is_the_pinned_version_on_every_attempt(spark, tmp_path):
    """``run.table_snapshot``: a dimension table's whole content at the version the barrier
    pinned. Its writer moves on between the failed first attempt and the retry; the retry
    joins the same rows, and the published table equals pandas over the pinned version."""
    from deltalake import write_deltalake

    dim = f"file://{tmp_path}/dims/carriers"
    write_deltalake(dim, pd.DataFrame({"code": ["AA", "UA"], "name": ["American", "United"]}))
    out = TableSpec(f"file://{tmp_path}/gold/named", mode="overwrite")
    seen: list[list[str]] = []

    def job(run):
        names = run.table_snapshot("carriers")
        seen.append(sorted(r["name"] for r in names.collect()))
        if len(seen) == 1:  # the dimension's writer moves on, then this attempt dies
            write_deltalake(dim, pd.DataFrame({"code": ["DL"], "name": ["Delta"]}),
                            mode="append")
            raise RuntimeError("killed after reading the snapshot")
        run.write_table(names.selectExpr("code", "upper(name) AS name"), "named", out)
        return JobResult()

    pipe = Pipeline({"named": []}, {"named": job},
                    plan_from_edges({"named": []}, {"named"},
                                    {"named": {"carriers": TableInput(dim)}}))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "named")
    with pytest.raises(RuntimeError, match="killed"):
        drive_epoch(pipe, c, spark, "", "r1")
    epoch, meta = drive_epoch(pipe, c, spark, "", "r1")
    assert meta is not None and meta.completed
    assert seen == [["American", "United"], ["American", "United"]]
    assert c.barrier(epoch).table_version("carriers").version == 0
    pinned = DeltaTable(dim, version=0).to_pandas()
    published = DeltaTable(out.location).to_pandas()
    assert sorted(zip(published["code"], published["name"], strict=True)) == \
        sorted(zip(pinned["code"], pinned["name"].str.upper(), strict=True))


_READER = """
import json, sys
from spark_jobs.runtime import spark_session
spark = spark_session("sql-user")
name, versions = sys.argv[1], json.loads(sys.argv[2])
out = {"rows": {v: sorted(map(list, spark.sql(
           f"SELECT day, n FROM {name} VERSION AS OF {v}").collect())) for v in versions},
       "history": [[r["version"], (r["userMetadata"] or "")] for r in spark.sql(
           f"DESCRIBE HISTORY {name}").collect()],
       "names": [r["tableName"] for r in spark.sql("SHOW TABLES IN gold").collect()]}
print("RESULT " + json.dumps(out))
spark.stop()
"""


def test_a_delta_output_is_found_by_its_catalog_name_from_a_fresh_session(tmp_path):
    """A Delta output declared with ``name='gold.daily'`` is registered in Spark's session
    catalog over a metastore (embedded Derby here, as by default): after three epochs, a
    Spark that never wrote it (a new local-mode process, the writer's server stopped)
    reads every version by name, equal to delta-rs's read of it, and ``DESCRIBE HISTORY``
    shows one version per epoch. A second output naming it at another location is refused
    in one line, and the table is registered once."""
    import json
    import os
    import subprocess
    import sys

    from spark_jobs.runtime import spark_session
    from spark_jobs.runtime.catalog import CatalogNameError
    from spark_jobs.runtime.connect_server import ConnectServer

    metastore = f"jdbc:derby:;databaseName={tmp_path}/metastore;create=true"
    loc = f"file://{tmp_path}/gold/daily"
    out = TableSpec(loc, mode="append", name="gold.daily")

    def job(run):
        day = run.epoch_id
        run.write_table(run.spark.createDataFrame([(f"d{day}", day * 10)], "day string, n long"),
                        "daily", out)
        return JobResult()

    pipe = Pipeline({"daily": []}, {"daily": job}, plan_from_edges({"daily": []}, {"daily"}))
    server = ConnectServer(port=0, driver_memory="1g", log_path=tmp_path / "server.log",
                           metastore=metastore).start()
    try:
        spark = spark_session("catalog", remote=server.url)
        c = Coordinator(LocalStorage(tmp_path / "ckpt"), "gold")
        for day in range(1, 4):
            drive_epoch(pipe, c, spark, "", f"r{day}")
        other = TableSpec(f"file://{tmp_path}/elsewhere", name="gold.daily")

        def squatter(run):
            run.write_table(run.spark.createDataFrame([("x", 1)], "day string, n long"),
                            "daily", other)
            return JobResult()

        clash = Pipeline({"daily": []}, {"daily": squatter},
                         plan_from_edges({"daily": []}, {"daily"}))
        with pytest.raises(CatalogNameError) as refused:
            drive_epoch(clash, Coordinator(LocalStorage(tmp_path / "ckpt2"), "other"),
                        spark, "", "r1")
        assert "\n" not in str(refused.value) and "gold.daily" in str(refused.value)
        assert str(tmp_path) not in str(refused.value)  # no storage path in a failure
        spark.stop()
    finally:
        server.stop()
    versions = list(range(DeltaTable(loc).version() + 1))
    assert versions == [0, 1, 2, 3]  # version 0 created it; one version per epoch
    env = {**os.environ, "CKPT_METASTORE_URL": metastore}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env.pop("SPARK_REMOTE", None)
    r = subprocess.run([sys.executable, "-c", _READER, "gold.daily", json.dumps(versions)],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(r.stdout.split("RESULT ", 1)[1])
    for v in versions:
        expected = DeltaTable(loc, version=v).to_pandas()
        assert found["rows"][str(v)] == sorted(
            [d, int(n)] for d, n in zip(expected["day"], expected["n"], strict=True)), v
    assert sorted(v for v, _ in found["history"]) == versions
    # the epoch of each version, in the column Spark's DESCRIBE HISTORY shows
    assert sorted(json.loads(m)["ckpt.epoch_id"] for _, m in found["history"] if m) == [1, 2, 3]
    assert found["names"] == ["daily"]
    epochs = [h.get("ckpt.epoch_id") for h in DeltaTable(loc).history()]
    assert sorted(e for e in epochs if e) == ["1", "2", "3"]


def test_a_catalog_name_without_a_metastore_is_refused_in_one_line(spark, tmp_path):
    """Spark's in-memory catalog would forget the name with the server: refused, naming
    the setting, before the table is created; nothing acknowledged."""
    from spark_jobs.runtime.catalog import CatalogNameError

    out = TableSpec(f"file://{tmp_path}/gold/t", name="gold.t")

    def job(run):
        run.write_table(run.spark.createDataFrame([("a", 1)], "day string, n long"), "t", out)
        return JobResult()

    pipe = Pipeline({"t": []}, {"t": job}, plan_from_edges({"t": []}, {"t"}))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "named")
    with pytest.raises(CatalogNameError, match="CKPT_METASTORE_URL") as refused:
        drive_epoch(pipe, c, spark, "", "r1")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "gold/t/_delta_log").exists()
    assert c.latest_completed() is None


def test_table_inputs_named_in_spark_s_catalog_over_a_postgresql_metastore(tmp_path,
                                                                          monkeypatch):
    """Spark's catalog over a PostgreSQL metastore, as the deployment shares it: a bronze
    table plain Spark created by name, read as the table input ``bronze.orders``; the begin
    step (no Spark) finds its location in the metastore and the barrier records it. The
    pipeline's output, named ``gold.sums``, is read by a second pipeline as the input
    ``gold.sums``. After every epoch each equals Spark's own query of the name at the
    version the barrier pinned. A name the catalog lacks and a table that is not Delta are
    refused at the begin in one line, allocating nothing."""
    from pyspark.sql import functions as F
    from sqlalchemy.engine import make_url

    from bench.harness.pg import fresh_database
    from spark_jobs.runtime import spark_session
    from spark_jobs.runtime.connect_server import ConnectServer

    db = make_url(fresh_database("metastore_lakehouse"))
    jdbc = f"jdbc:postgresql://{db.host}:{db.port or 5432}/{db.database}"
    monkeypatch.setenv("CKPT_METASTORE_URL", jdbc)
    monkeypatch.setenv("CKPT_METASTORE_USER", db.username or "")
    monkeypatch.setenv("CKPT_METASTORE_PASSWORD", db.password or "")
    server = ConnectServer(port=0, driver_memory="1g", log_path=tmp_path / "server.log",
                           metastore=jdbc).start()
    try:
        spark = spark_session("named-inputs", remote=server.url)
        orders = f"{tmp_path}/bronze/orders"
        spark.sql("CREATE SCHEMA IF NOT EXISTS bronze")
        spark.sql(f"CREATE TABLE bronze.orders (key STRING, value BIGINT) USING delta "
                  f"LOCATION '{orders}' TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        spark.sql("INSERT INTO bronze.orders SELECT CAST(id % 11 AS STRING), id "
                  "FROM range(0, 1500, 1, 3)")
        sums = TableSpec(f"file://{tmp_path}/gold/sums", "overwrite", name="gold.sums")
        first = _sums_pipeline(TableInput(name="bronze.orders"), sums, {})
        c = Coordinator(LocalStorage(tmp_path / "ckpt"), "sums")
        counts = TableSpec(f"file://{tmp_path}/gold/counts", "overwrite")
        second = _sums_pipeline(TableInput(name="gold.sums"), counts, {}, value="total")
        c2 = Coordinator(LocalStorage(tmp_path / "ckpt"), "sums_of_sums")

        def query(name: str, version: int, value: str) -> list:
            return sorted((r.key, int(r.total), int(r.n)) for r in spark.sql(
                f"SELECT * FROM {name} VERSION AS OF {version}").groupBy("key").agg(
                F.sum(value).alias("total"), F.count("*").alias("n")).collect())

        for i, sql in enumerate(["", "DELETE FROM bronze.orders WHERE value % 5 = 0",
                                 "UPDATE bronze.orders SET value = value * 2 WHERE key = '4'"]):
            if sql:
                spark.sql(sql)
            epoch, meta = drive_epoch(first, c, spark, "", f"r{i}")
            assert meta is not None and meta.completed, meta
            barrier = c.barrier(epoch)
            assert barrier.plan["agg"].table_inputs["src"] == TableInput(
                f"file://{orders}", name="bronze.orders")
            got = DeltaTable(sums.location).to_pandas()
            assert sorted((r.key, int(r.total), int(r.n)) for r in got.itertuples()) == \
                query("bronze.orders", barrier.table_version("src").version, "value"), i
            epoch2, meta2 = drive_epoch(second, c2, spark, "", f"r{i}")
            assert meta2 is not None and meta2.completed, meta2
            pinned = c2.barrier(epoch2).table_version("src").version
            got2 = DeltaTable(counts.location).to_pandas()
            assert sorted((r.key, int(r.total), int(r.n)) for r in got2.itertuples()) == \
                query("gold.sums", pinned, "total"), i
        spark.sql(f"CREATE TABLE bronze.flat (a INT) USING parquet "
                  f"LOCATION '{tmp_path}/bronze/flat'")
        for name, words in (("bronze.missing", "no such table"), ("bronze.flat", "parquet")):
            other = Coordinator(LocalStorage(tmp_path / "ckpt"), f"refused_{name[7:]}")
            pipe = _sums_pipeline(TableInput(name=name), counts, {})
            with pytest.raises(TableInputError, match=words) as refused:
                drive_epoch(pipe, other, spark, "", "r1")
            assert "\n" not in str(refused.value) and str(tmp_path) not in str(refused.value)
            assert other.store.registry().last_epoch_id == 0
        spark.stop()
    finally:
        server.stop()
