"""Spark's own lakehouse: every Spark the project starts carries Delta Lake's Spark runtime
(the Connect server here; local and spark-submit sessions the same way). A job reads Delta
tables through Spark; every version the project commits, read by Spark's Delta reader at
that version, equals delta-rs's read of it, one version per epoch in ``DESCRIBE HISTORY``;
and a table Spark wrote with deletion vectors, which table inputs do not read
incrementally yet, is refused in one line, naming the feature."""

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


def _rows(df: pd.DataFrame) -> list[tuple]:
    return sorted(map(tuple, df[["day", "n"]].astype({"n": "int64"}).itertuples(index=False)))


def test_spark_reads_every_version_the_project_commits_as_delta_rs_does(spark, tmp_path):
    loc = f"file://{tmp_path}/gold/daily"
    out = TableSpec(loc, mode="append")

    def job(run):
        day = run.epoch_id
        run.write_table(run.spark.createDataFrame([(f"d{day}", day * 10)], "day string, n long"),
                        "daily", out)
        return JobResult()

    pipe = Pipeline({"daily": []}, {"daily": job},
                    plan_from_edges({"daily": []}, {"daily"}))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "gold")
    for day in range(1, 4):
        drive_epoch(pipe, c, spark, "", f"r{day}")
    versions = list(range(DeltaTable(loc).version() + 1))
    epochs = [h.get("ckpt.epoch_id") for h in DeltaTable(loc).history()]
    assert sorted(e for e in epochs if e) == ["1", "2", "3"]  # one version per epoch
    for v in versions:
        by_spark = spark.read.format("delta").option("versionAsOf", v).load(loc).toPandas()
        assert _rows(by_spark) == _rows(DeltaTable(loc, version=v).to_pandas()), v
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path}/gold/daily`").toPandas()
    assert sorted(history["version"]) == versions


def test_a_spark_written_table_with_deletion_vectors_is_refused_in_one_line(spark, tmp_path):
    path = f"{tmp_path}/bronze/events"
    spark.range(100).selectExpr("id", "id % 7 AS k").write.format("delta") \
        .option("delta.enableDeletionVectors", "true").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE k = 3")  # Spark writes a deletion vector
    spec = TableInput(f"file://{path}")
    end = pin(spec)
    assert end.version == 1
    with pytest.raises(TableInputError, match="deletion vectors") as refused:
        changes(spec, None, end)
    assert "\n" not in str(refused.value)
    # Spark itself reads the table: 100 rows less the deleted ones
    assert spark.read.format("delta").load(path).count() == 100 - 14


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
