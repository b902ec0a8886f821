"""Table inputs over histories of an Iceberg table that Spark writes: Hypothesis draws
INSERTs, DELETEs, UPDATEs and MERGEs (merge-on-read: position delete files in format 2, a
deletion vector per data file in format 3; or copy-on-write), data-file and delete-file
compactions (``rewrite_data_files``, ``rewrite_position_delete_files``), schema changes (a
column added, renamed, dropped, or dropped and added again under its name), zero to three
commits an epoch. After every epoch, the rows summed from the change sets of the pinned
range equal Spark's own read of the table ``VERSION AS OF`` the pinned snapshot, computed
independently (Iceberg's Spark runtime applies the deletes; the change sets are read by
pyarrow by position); and each change set, over every column of the pinned schema, read
by pyarrow and by the job runtime's Spark reader, equals Spark's read at its end less its
read at its start, whose columns are matched to the end's by field id. The table is
shared through one catalog: Iceberg's JDBC catalog in Spark and pyiceberg's SQL catalog
over the same SQLite file."""

from __future__ import annotations

import os
import uuid
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointing.protocol.table_inputs import TableInput, TableInputError
from checkpointing.tables.changes import changes, pin
from tests.support.change_rows import histories, history_settings, signed_rows

EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "6"))
READ = ["id", "key", "value"]
OPS = ["insert", "insert", "delete", "update", "merge", "rewrite_data",
       "rewrite_deletes", "add_column", "readd_column", "rename_column", "drop_column"]
#: How the table is written: (format version, write mode of DELETE/UPDATE/MERGE)
LAYOUTS = [(2, "merge-on-read"), (3, "merge-on-read"), (2, "copy-on-write")]


@pytest.fixture(scope="module")
def lake(spark_connect, tmp_path_factory):
    """A Spark Connect session with the catalog ``up`` over a SQLite file that pyiceberg is
    configured with too (catalogs are looked up by name when first used: set at run time)."""
    from spark_jobs.runtime import spark_session

    root = tmp_path_factory.mktemp("iceberg-up")
    os.environ["PYICEBERG_CATALOG__UP__TYPE"] = "sql"
    os.environ["PYICEBERG_CATALOG__UP__URI"] = f"sqlite:///{root}/catalog.db"
    os.environ["PYICEBERG_CATALOG__UP__WAREHOUSE"] = f"file://{root}/wh"
    spark = spark_session("iceberg-histories", remote=spark_connect.url)
    spark.conf.set("spark.sql.catalog.up", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.up.type", "jdbc")
    spark.conf.set("spark.sql.catalog.up.uri", f"jdbc:sqlite:{root}/catalog.db")
    spark.conf.set("spark.sql.catalog.up.warehouse", f"file://{root}/wh")
    spark.conf.set("spark.sql.catalog.up.jdbc.schema-version", "V1")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS up.bronze")
    yield spark
    spark.stop()
    for k in ("PYICEBERG_CATALOG__UP__TYPE", "PYICEBERG_CATALOG__UP__URI",
              "PYICEBERG_CATALOG__UP__WAREHOUSE"):
        os.environ.pop(k, None)


def _apply(spark, table: str, op: str, n: int, state: dict) -> None:
    extras = state.setdefault("extras", ["extra"])
    if op == "insert":
        lo = state["next"]
        state["next"] += 8 + n
        # each write's own values in the extra columns: a stale column read by name shows
        values = ", ".join("(" + ", ".join([str(i), f"'k{i % 5}'", str(i)] +
                                           [f"'{e}{i}'" for e in extras]) + ")"
                           for i in range(lo, state["next"]))
        spark.sql(f"INSERT INTO {table} ({', '.join(READ + extras)}) VALUES {values}")
    elif op == "add_column" and "extra" not in extras:
        spark.sql(f"ALTER TABLE {table} ADD COLUMN extra STRING")
        extras.append("extra")
    elif op == "readd_column" and "extra" in extras:
        # dropped and added again under its name: a new column (a new field id)
        spark.sql(f"ALTER TABLE {table} DROP COLUMN extra")
        spark.sql(f"ALTER TABLE {table} ADD COLUMN extra STRING")
    elif op == "rename_column" and len(extras) == 1:
        new = "note" if extras[0] == "extra" else "extra"
        spark.sql(f"ALTER TABLE {table} RENAME COLUMN {extras[0]} TO {new}")
        extras[0] = new
    elif op == "drop_column" and extras:
        spark.sql(f"ALTER TABLE {table} DROP COLUMN {extras.pop(n % len(extras))}")
    elif op == "delete":
        spark.sql(f"DELETE FROM {table} WHERE key = 'k{n % 5}'")
    elif op == "update":
        # a key moving between groups too: the updated rows change key and value
        spark.sql(f"UPDATE {table} SET value = value + 100, key = 'k{(n + 1) % 5}' "
                  f"WHERE key = 'k{n % 5}' AND id % 2 = 0")
    elif op == "merge":
        lo = state["next"]
        state["next"] += 3
        spark.sql(f"""MERGE INTO {table} t USING (SELECT * FROM VALUES
                      ({n}, 'k{n % 5}', -1), ({n + 1}, 'k0', -2), ({lo}, 'k1', {lo}),
                      ({lo + 1}, 'k2', {lo + 1}) AS s(id, key, value)) s
                      ON t.id = s.id
                      WHEN MATCHED AND s.value = -2 THEN DELETE
                      WHEN MATCHED THEN UPDATE SET t.value = t.value + 1000
                      WHEN NOT MATCHED THEN INSERT (id, key, value)
                        VALUES (s.id, s.key, s.value)""")
    elif op == "rewrite_data":
        spark.sql(f"CALL up.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
                  "options => map('min-input-files', '2'))")
    elif op == "rewrite_deletes":
        spark.sql(f"CALL up.system.rewrite_position_delete_files("
                  f"table => '{table.split('.', 1)[1]}', options => map('rewrite-all', 'true'))")


def _spark_rows(spark, table: str, snapshot_id: int | None) -> Counter:
    if snapshot_id is None:
        return Counter()
    rows = spark.sql(f"SELECT {', '.join(READ)} FROM {table} VERSION AS OF {snapshot_id}")
    return Counter(tuple(r) for r in rows.collect())


def _ids(spec: TableInput, snapshot_id: int) -> dict[int, str]:
    """Field id -> column name in the schema of snapshot ``snapshot_id`` (the catalog's
    metadata, read by pyiceberg: which column of one schema is which of another)."""
    from pyiceberg.catalog import load_catalog

    table = load_catalog(spec.catalog).load_table(spec.name)
    snap = table.snapshot_by_id(snapshot_id)
    schema = next(s for s in table.schemas().values() if s.schema_id == snap.schema_id)
    return {f.field_id: f.name for f in schema.fields}


def _spark_in(spark, spec: TableInput, snapshot_id: int | None, end: int) -> Counter:
    """Spark's read ``VERSION AS OF snapshot_id`` (in that snapshot's schema), its columns
    matched to those of snapshot ``end`` by field id (a column it has not: null)."""
    if snapshot_id is None:
        return Counter()
    source, target = _ids(spec, snapshot_id), _ids(spec, end)
    picked = ", ".join(f"`{source[i]}`" if i in source else "NULL" for i in target)
    return Counter(tuple(r) for r in spark.sql(
        f"SELECT {picked} FROM up.{spec.name} VERSION AS OF {snapshot_id}").collect())


def _runtime_rows(spark, spec: TableInput, start, end, columns: list[str]) -> Counter:
    """The change set as the job runtime reads it (Spark, by field id), as signed counts."""
    from spark_jobs.runtime.table_source import SIGN, read_changes

    found = read_changes(spark, "up", spec, start, end, None)
    counts: Counter = Counter()
    for r in found.signed().select(*columns, SIGN).collect():
        counts[tuple(r[:-1])] += r[-1]
    return counts


@history_settings(EXAMPLES)
@given(epochs=histories(OPS, 4), layout=st.sampled_from(LAYOUTS))
def test_change_sets_of_spark_written_histories_sum_to_spark_s_read(lake, epochs, layout):
    spark = lake
    version, mode = layout
    name = f"bronze.t_{uuid.uuid4().hex[:8]}"
    table = f"up.{name}"
    spark.sql(f"""CREATE TABLE {table} (id BIGINT, key STRING, value BIGINT, extra STRING)
                  USING iceberg TBLPROPERTIES ('format-version' = '{version}',
                                 'write.delete.mode' = '{mode}',
                                 'write.update.mode' = '{mode}',
                                 'write.merge.mode' = '{mode}')""")
    spec = TableInput(None, "iceberg", name=name, catalog="up")
    state = {"next": 0}
    _apply(spark, table, "insert", 3, state)
    consumed = None
    total: Counter = Counter()
    for commits in epochs:
        for op, n in commits:
            _apply(spark, table, op, n, state)
        pinned = pin(spec)
        cs = changes(spec, consumed, pinned)
        columns = list(_ids(spec, pinned.snapshot_id).values())
        want = _spark_in(spark, spec, pinned.snapshot_id, pinned.snapshot_id)
        want.subtract(_spark_in(spark, spec, consumed and consumed.snapshot_id,
                                pinned.snapshot_id))
        want = Counter({k: v for k, v in want.items() if v})
        found = Counter({k: v for k, v in signed_rows(cs, columns).items() if v})
        assert found == want, (version, mode, epochs, columns)
        assert _runtime_rows(spark, spec, consumed, pinned, columns) == want, \
            (version, mode, epochs, columns)
        total.update(signed_rows(cs, READ))
        total = +total
        expected = _spark_rows(spark, table, pinned.snapshot_id)
        assert total == expected, (version, mode, epochs)
        # a retry of the epoch reads the same range again, whatever came after it
        _apply(spark, table, "insert", 1, state)
        assert signed_rows(changes(spec, consumed, pinned), READ) == \
            signed_rows(cs, READ)
        consumed = pinned
        total = Counter(expected)
        # what the retry's extra insert added is read by the next epoch
    spark.sql(f"DROP TABLE {table}")


def test_a_needed_snapshot_expired_is_declined_in_one_line(lake):
    spark = lake
    name = f"bronze.t_{uuid.uuid4().hex[:8]}"
    table = f"up.{name}"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, key STRING, value BIGINT) USING iceberg "
              "TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read')")
    spec = TableInput(None, "iceberg", name=name, catalog="up")
    state = {"next": 0, "extras": []}
    _apply(spark, table, "insert", 1, state)
    consumed = pin(spec)
    _apply(spark, table, "delete", 1, state)
    _apply(spark, table, "insert", 2, state)
    spark.sql(f"CALL up.system.expire_snapshots(table => '{name}', "
              "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)")
    with pytest.raises(TableInputError) as err:
        changes(spec, consumed, pin(spec))
    message = str(err.value)
    assert "\n" not in message and "expired" in message and "/" not in message.split(":")[0]


#: Run in a fresh process with a local Spark (py4j reaches Iceberg's Java API): a table with
#: one equality delete file, committed by Iceberg's own RowDelta (Spark SQL writes none;
#: streaming writers do). The file is written by pyarrow with Iceberg's field ids.
_EQUALITY_DELETE = """
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
from spark_jobs.runtime import spark_session
name, path = sys.argv[1], sys.argv[2]
spark = spark_session("equality-deletes")
spark.sql(f"CREATE TABLE up.{name} (id BIGINT NOT NULL, key STRING, value BIGINT) "
          "USING iceberg TBLPROPERTIES ('format-version' = '2')")
spark.sql(f"INSERT INTO up.{name} VALUES (1, 'k1', 1), (2, 'k2', 2), (3, 'k3', 3)")
field = pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"})
pq.write_table(pa.table({"id": pa.array([2], pa.int64())}, schema=pa.schema([field])), path)
jvm, gw = spark._jvm, spark.sparkContext._gateway
catalog = spark._jsparkSession.sessionState().catalogManager().catalog("up")
table = catalog.icebergCatalog().loadTable(
    jvm.org.apache.iceberg.catalog.TableIdentifier.parse(name))
ids = gw.new_array(gw.jvm.int, 1)
ids[0] = 1
import os
delete = (jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.spec())
          .ofEqualityDeletes(ids).withPath(path).withFormat("parquet")
          .withFileSizeInBytes(os.path.getsize(path)).withRecordCount(1).build())
table.newRowDelta().addDeletes(delete).commit()
print("RESULT " + json.dumps(sorted(r.id for r in spark.sql(f"SELECT id FROM up.{name}")
                                    .collect())))
spark.stop()
"""


def test_equality_deletes_are_declined_in_one_line(lake, tmp_path):
    """A table that really has an equality delete file: Spark's read applies it (row 2 is
    gone), and a table input declines the snapshot in one line, without a path."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    name = f"bronze.eq_{uuid.uuid4().hex[:8]}"
    proc = subprocess.run([sys.executable, "-c", _EQUALITY_DELETE, name,
                           str(tmp_path / "eq-deletes.parquet")],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=600, check=False,
                          env=_without_connect_mode())
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    assert json.loads(lines[-1].removeprefix("RESULT ")) == [1, 3]
    spec = TableInput(None, "iceberg", name=name, catalog="up")
    with pytest.raises(TableInputError) as err:
        changes(spec, None, pin(spec))
    message = str(err.value)
    assert "\n" not in message and "equality deletes" in message
    assert str(tmp_path) not in message and "https://" not in message


def _without_connect_mode() -> dict[str, str]:
    """This process's environment for a child that starts a local Spark: a Connect session
    made here sets SPARK_CONNECT_MODE_ENABLED, which would make the child's builder insist
    on a remote."""
    return {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_MODE_ENABLED"}


@pytest.mark.parametrize("version", [2, 3], ids=["position-deletes", "deletion-vectors"])
def test_a_pipeline_over_a_spark_written_iceberg_table_survives_a_kill_exactly_once(
        lake, tmp_path, version):
    """A checkpointed pipeline over an Iceberg table Spark writes merge-on-read: two commits
    between epochs, an epoch with no change, a compaction, and an attempt killed between
    its snapshot and its acknowledgement while the upstream deletes more rows before the
    retry. After every epoch the published aggregate equals Spark's own aggregate of the
    upstream ``VERSION AS OF`` the snapshot the barrier pinned."""
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    from checkpointing import Coordinator, LocalStorage
    from checkpointing.tables.spec import TableSpec
    from spark_jobs.runtime import drive_epoch
    from tests.integration.test_spark_lakehouse import _sums_pipeline

    spark = lake
    name = f"bronze.orders_{uuid.uuid4().hex[:8]}"
    t = f"up.{name}"
    spark.sql(f"CREATE TABLE {t} (key STRING, value BIGINT) USING iceberg TBLPROPERTIES "
              f"('format-version' = '{version}', 'write.delete.mode' = 'merge-on-read', "
              "'write.update.mode' = 'merge-on-read', 'write.merge.mode' = 'merge-on-read')")
    spark.sql(f"INSERT INTO {t} SELECT CAST(id % 13 AS STRING), id FROM range(0, 2000, 1, 4)")
    out = TableSpec(f"file://{tmp_path}/gold/sums", "overwrite")
    fail: dict = {}
    pipe = _sums_pipeline(TableInput(None, "iceberg", name=name, catalog="up"), out, fail)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "sums")

    def check(epoch: int) -> None:
        pinned = c.barrier(epoch).table_version("src").snapshot_id
        want = spark.sql(f"SELECT * FROM {t} VERSION AS OF {pinned}") \
            .groupBy("key").agg(F.sum("value").alias("total"), F.count("*").alias("n"))
        got = DeltaTable(f"{tmp_path}/gold/sums").to_pandas()
        assert sorted((r.key, int(r.total), int(r.n)) for r in got.itertuples()) == \
            sorted((r.key, int(r.total), int(r.n)) for r in want.collect()), epoch

    steps = [
        [],
        [f"DELETE FROM {t} WHERE value % 7 = 0",
         f"UPDATE {t} SET value = value + 1 WHERE key = '3'"],
        [],  # no change
        [f"MERGE INTO {t} USING (SELECT CAST(id % 13 AS STRING) AS key, id AS value FROM "
         f"range(1990, 2010)) s ON {t}.value = s.value WHEN MATCHED THEN DELETE "
         "WHEN NOT MATCHED THEN INSERT *"],
        [f"CALL up.system.rewrite_position_delete_files(table => '{name}', "
         "options => map('rewrite-all', 'true'))",
         f"CALL up.system.rewrite_data_files(table => '{name}', "
         "options => map('rewrite-all', 'true'))"],  # compactions: no change for the job
    ]
    for i, statements in enumerate(steps):
        for sql in statements:
            spark.sql(sql)
        epoch, meta = drive_epoch(pipe, c, spark, "", f"r{i}")
        assert meta is not None and meta.completed, meta
        check(epoch)
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
