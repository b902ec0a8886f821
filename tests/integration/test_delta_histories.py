"""Table inputs over histories, not change kinds: Hypothesis draws what a real upstream's
maintenance does between two epochs (INSERT, DELETE, UPDATE and MERGE with deletion vectors
on or off and the change data feed on or off, OPTIMIZE, REORG PURGE, RESTORE, VACUUM, an
added column, a renamed and a dropped column the job does not read), zero to four commits an
epoch, written by real delta-spark. An epoch with no commit, or whose only commits are
compactions, has no change at all. After every epoch the rows kept from the change sets
(added minus removed, as a job's state keeps them) equal the upstream's content at the
pinned version, read independently by Spark's Delta reader. A retry reads the pinned range
again after the upstream moved on (a kill between the pin and the read, the rerun after
another commit) and must find the same rows. Every refusal is one line without a path; the
job then starts afresh from the table's content, the refusal's way forward.

``make test`` runs the named histories (the explicit examples) and one drawn at a fixed
seed; ``make soak`` draws many (CKPT_HISTORY_EXAMPLES examples, reported at the end)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from checkpointing.protocol.table_inputs import TableInput, TableInputError, TableVersion
from checkpointing.tables.changes import pin

#: drawn examples in `make test` (besides the explicit ones); `make soak` sets many
EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "1"))
READ = ("id", "k", "v")  # the columns the job reads; `extra` is added, renamed, dropped


@pytest.fixture(scope="module")
def spark(spark_connect):
    from spark_jobs.runtime import spark_session

    session = spark_session("histories", remote=spark_connect.url)
    # VACUUM with no retention: the files a history compacts go at once, as they do a week
    # later on a real table.
    session.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    yield session
    session.stop()


@dataclass
class Upstream:
    """What the drawn history knows of the table it writes."""

    table: str
    mapped: bool  # column mapping: renames and drops are allowed
    next_id: int = 0
    versions: int = 1
    extra: str | None = None  # the unread column, once added
    renamed: int = 0
    log: list[str] = field(default_factory=list)


def _ops(mapped: bool) -> st.SearchStrategy[tuple[str, int]]:
    kinds = ["insert", "insert", "delete", "update", "merge", "optimize", "purge",
             "restore", "vacuum", "add_column"]
    if mapped:
        kinds += ["rename_unread", "drop_unread"]
    return st.tuples(st.sampled_from(kinds), st.integers(0, 6))


def _statements(u: Upstream, op: str, n: int) -> list[str]:
    t = u.table
    if op == "insert":
        lo, u.next_id = u.next_id, u.next_id + 40 + 10 * n
        cols = "id, id % 7, id * 3" + (", 'x'" if u.extra else "")
        return [f"INSERT INTO {t} SELECT {cols} FROM range({lo}, {u.next_id}, 1, 2)"]
    if op == "delete":
        return [f"DELETE FROM {t} WHERE k = {n}"]
    if op == "update":
        return [f"UPDATE {t} SET v = v + 1 WHERE id % 5 = {n % 5}"]
    if op == "merge":
        lo = max(0, u.next_id - 30)
        u.next_id += 10
        return [f"MERGE INTO {t} USING (SELECT id, id % 7 AS k, id AS v FROM range({lo}, "
                f"{u.next_id})) s ON {t}.id = s.id WHEN MATCHED AND s.id % 3 = {n % 3} THEN "
                "DELETE WHEN MATCHED THEN UPDATE SET v = s.v + 100 "
                "WHEN NOT MATCHED THEN INSERT (id, k, v) VALUES (s.id, s.k, s.v)"]
    if op == "optimize":
        return [f"OPTIMIZE {t}"]
    if op == "purge":
        return [f"REORG TABLE {t} APPLY (PURGE)"]
    if op == "restore":
        # to a version of the drawn history (a restore over a schema change is refused by
        # Delta itself when it cannot be read; the history then goes on without it)
        return [f"RESTORE TABLE {t} TO VERSION AS OF {max(1, u.versions - 1 - n)}"]
    if op == "vacuum":
        return [f"VACUUM {t} RETAIN 0 HOURS"]
    if op == "add_column":
        if u.extra:
            return []
        u.extra = "extra"
        return [f"ALTER TABLE {t} ADD COLUMN extra STRING"]
    if op == "rename_unread" and u.extra:
        u.renamed += 1
        new = f"extra{u.renamed}"
        old, u.extra = u.extra, new
        return [f"ALTER TABLE {t} RENAME COLUMN {old} TO {new}"]
    if op == "drop_unread" and u.extra:
        old, u.extra = u.extra, None
        return [f"ALTER TABLE {t} DROP COLUMN {old}"]
    return []


def _unread_column(path: str) -> str | None:
    """The table's column besides the read ones, as its log says now."""
    names = [f.name for f in DeltaTable(path).schema().fields if f.name not in READ]
    return names[0] if names else None


def _content(spark, path: str, version: int) -> Counter:
    """The upstream's rows at ``version`` (the read columns), by Spark's own Delta reader
    (``versionAsOf``): deletion vectors applied, column mapping resolved, no code of this
    project's. (delta-rs 1.6 does not read tables with deletion vectors.)"""
    return Counter(tuple(r) for r in spark.read.format("delta").option("versionAsOf", version)
                   .load(path).select(*READ).collect())


def _apply(state: Counter, found) -> Counter:
    for row in found.added.select(*READ).collect():
        state[tuple(row)] += 1
    for row in found.removed.select(*READ).collect():
        state[tuple(row)] -= 1
    return state


def _run(spark, root: str, features: tuple[bool, ...],
         epochs: list[list[tuple[str, int]]], retry_after: list[bool]) -> dict[str, int]:
    from spark_jobs.runtime.table_source import read_changes

    dv, mapped, cdf = (*features, False)[:3]
    path = f"{root}/bronze"
    u = Upstream(f"delta.`{path}`", mapped)
    props = [f"'delta.enableDeletionVectors' = '{str(dv).lower()}'"]
    if mapped:
        props.append("'delta.columnMapping.mode' = 'name'")
    if cdf:
        props.append("'delta.enableChangeDataFeed' = 'true'")
    spark.sql(f"CREATE TABLE {u.table} (id BIGINT, k BIGINT, v BIGINT) USING delta "
              f"TBLPROPERTIES ({', '.join(props)})")
    spec = TableInput(f"file://{path}")
    state: Counter = Counter()
    start: TableVersion | None = None
    seen = {"commits": 0, "refusals": 0, "epochs": 0}
    after_pin: list[str] = []  # commits after the last pin: the next epoch reads them
    for i, ops in enumerate(epochs):
        committed, after_pin = after_pin, []  # the kinds of this epoch's commits
        for op, n in ops:
            u.extra = _unread_column(path)  # a RESTORE brings back the schema it restores
            for sql in _statements(u, op, n):
                try:
                    spark.sql(sql)
                except Exception as exc:  # noqa: BLE001 - Delta refusing a drawn statement
                    if op != "restore":
                        raise
                    u.log.append(f"refused by Delta: {type(exc).__name__}")
                    continue
                u.log.append(sql)
                u.versions = int(DeltaTable(path).version()) + 1
                seen["commits"] += 1
                committed.append(op)
        end = pin(spec)
        if retry_after[i % len(retry_after)]:
            # the first try dies after the pin; the upstream commits before the rerun, which
            # reads the same pinned range
            u.extra = _unread_column(path)
            for sql in _statements(u, "insert", i):
                spark.sql(sql)
                u.log.append(sql)
                after_pin.append("insert")
        refused = False
        try:
            found = read_changes(spark, "t", spec, start, end, None)
        except TableInputError as exc:
            text = str(exc)
            assert "\n" not in text and path not in text, text
            seen["refusals"] += 1
            refused = True
            # the way forward the refusal names: start afresh from the table's content
            found = read_changes(spark, "t", spec, None, end, None)
            state = Counter()
        if not refused and not set(committed) - {"optimize"}:
            # no commit, or compactions alone: no row changed, and nothing is read
            assert found.empty, (f"epoch {i}: {committed} changed rows", u.log)
        state = +_apply(state, found)
        want = _content(spark, path, end.version)
        assert state == want, (f"epoch {i} at version {end.version}: {len(state - want)} "
                               f"row(s) too many, {len(want - state)} missing", u.log)
        start = end
        seen["epochs"] += 1
    return seen


_REPORT: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report():
    """The property's example count, printed for `make soak`'s report."""
    yield
    if _REPORT["examples"]:
        print(f"\nhistories: {_REPORT['examples']} examples, {_REPORT['epochs']} epochs, "
              f"{_REPORT['commits']} commits, {_REPORT['refusals']} refusals")


#: Named histories, run by `make test` besides the drawn one: a table with deletion vectors
#: and the change data feed (deletes, an epoch with no change, UPDATE and MERGE, OPTIMIZE
#: alone, a delete with an insert, a RESTORE that brings deleted rows back), and one with
#: column mapping (a column added, renamed and dropped around deletes and a compaction).
DV_CDF = [[("insert", 9), ("delete", 3), ("delete", 4)], [], [("update", 0), ("merge", 1)],
          [("optimize", 0)], [("delete", 2), ("insert", 1)], [("restore", 3)]]
MAPPED = [[("add_column", 0)], [("delete", 1), ("rename_unread", 0)],
          [("drop_unread", 0), ("update", 2)], [("optimize", 0), ("delete", 5)]]


@seed(20261204)
# No shrinking: each step is a Spark commit, and a failure prints its whole drawn history.
@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@example(features=(True, False, True), epochs=DV_CDF, retry_after=[False])
@example(features=(True, True, False), epochs=MAPPED, retry_after=[False, True])
@given(features=st.tuples(st.booleans(), st.booleans(), st.booleans()),
       epochs=st.lists(st.lists(_ops(True), min_size=0, max_size=4), min_size=2, max_size=4),
       retry_after=st.lists(st.booleans(), min_size=1, max_size=3))
def test_change_sets_sum_to_the_content_at_every_pinned_version(spark, tmp_path_factory,
                                                                 features, epochs,
                                                                 retry_after):
    root = str(tmp_path_factory.mktemp("history"))
    # histories of an unmapped table draw no rename or drop
    if not features[1]:
        epochs = [[(op, n) for op, n in ops if op not in ("rename_unread", "drop_unread")]
                  for ops in epochs]
    # every history starts with rows, so the first epoch has something to read
    epochs = [[("insert", 0), *epochs[0]], *epochs[1:]]
    _REPORT.update(_run(spark, root, features, epochs, retry_after))
    _REPORT["examples"] += 1


def test_the_history_that_lost_totals_is_exact(spark, tmp_path):
    """The history a nightly compaction makes, named: deletion-vector DELETE, UPDATE and
    MERGE each followed by OPTIMIZE or REORG PURGE of the same files between two epochs
    (the deleted rows must be subtracted; the updated rows' old values retracted)."""
    epochs = [[("insert", 0), ("insert", 1)],
              [("delete", 3), ("optimize", 0)],
              [("update", 1), ("optimize", 0)],
              [("merge", 2), ("purge", 0)],
              [("delete", 4), ("purge", 0), ("insert", 2)]]
    seen = _run(spark, str(tmp_path), (True, False), epochs, [False])
    assert seen["epochs"] == 5 and seen["refusals"] == 0


def test_the_verify_switch_declines_a_change_set_that_is_not_the_difference(spark, tmp_path):
    """The production check (``verify_table_inputs_every``): a change set that lost its
    retractions, as the reader's old bug did, is refused in one line; the true one of the
    same range passes; a column renamed under column mapping is the same column."""
    import dataclasses

    from checkpointing.tables.changes import changes
    from spark_jobs.runtime.table_source import ChangeMismatch, read_changes, verify_changes

    path = f"{tmp_path}/bronze"
    t = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {t} (id BIGINT, k BIGINT, v BIGINT, extra STRING) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
              "'delta.columnMapping.mode' = 'name')")
    spark.sql(f"INSERT INTO {t} SELECT id, id % 7, id, 'x' FROM range(0, 300, 1, 3)")
    spec = TableInput(f"file://{path}")
    start = pin(spec)
    spark.sql(f"DELETE FROM {t} WHERE k = 2")
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN extra TO extra2")
    spark.sql(f"OPTIMIZE {t}")
    end = pin(spec)
    found = read_changes(spark, "t", spec, start, end, None)
    verify_changes(spark, "t", spec, found, None)  # the true change passes
    lost = changes(spec, start, end)
    assert lost.removed  # the DELETE's retraction
    broken = dataclasses.replace(found, removed=found.added.limit(0),
                                 change_set=dataclasses.replace(lost, removed=()))
    with pytest.raises(ChangeMismatch) as refused:
        verify_changes(spark, "t", spec, broken, None)
    text = str(refused.value)
    assert "\n" not in text and path not in text and f"{start.version}..{end.version}" in text


def test_a_renamed_column_the_job_reads_declines_the_epoch_naming_it(spark, tmp_path):
    """Under column mapping a rename is no change to the rows, but a job that still reads
    the old name cannot run: the epoch is declined in one line naming the column, its new
    name and the version, with the task recorded, instead of the job's long traceback."""
    from checkpointing import Coordinator, LocalStorage
    from checkpointing.tables.spec import TableSpec
    from spark_jobs.runtime import DeclineEpoch, drive_epoch
    from tests.integration.test_spark_lakehouse import _sums_pipeline

    path = f"{tmp_path}/bronze"
    t = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {t} (key STRING, value BIGINT) USING delta TBLPROPERTIES "
              "('delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = 'name')")
    spark.sql(f"INSERT INTO {t} SELECT CAST(id % 5 AS STRING), id FROM range(0, 100, 1, 2)")
    pipe = _sums_pipeline(f"file://{path}", TableSpec(f"file://{tmp_path}/gold", "overwrite"),
                          {})
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "renames")
    epoch, meta = drive_epoch(pipe, c, spark, "", "r1")
    assert meta is not None and meta.completed
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN value TO amount")
    renamed_at = int(DeltaTable(path).version())
    spark.sql(f"INSERT INTO {t} VALUES ('9', 1)")
    with pytest.raises(DeclineEpoch) as declined:
        drive_epoch(pipe, c, spark, "", "r2")
    text = str(declined.value)
    assert "\n" not in text and path not in text, text
    assert "'value' was renamed to 'amount'" in text and f"version {renamed_at}" in text
    meta = c.metadata(epoch + 1)  # the task is recorded as the one that declined
    assert meta is not None and meta.status == "aborted" and meta.declined_by == "agg", meta


def test_a_vacuumed_deletion_vector_is_refused_in_one_line(spark, tmp_path):
    """A deletion vector purged, then vacuumed, between two epochs: the rows it deleted
    cannot be told apart; one line with the way forward, not delta-rs's "Kernel error".
    (Files appended, compacted and vacuumed: tests/unit/test_delta_rs_histories.py.)"""
    from checkpointing.tables.changes import changes

    history = ["DELETE FROM {t} WHERE k = 1", "REORG TABLE {t} APPLY (PURGE)",
               "VACUUM {t} RETAIN 0 HOURS"]
    path = f"{tmp_path}/bronze"
    t = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {t} (id BIGINT, k BIGINT, v BIGINT) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO {t} SELECT id, id % 7, id FROM range(0, 100, 1, 2)")
    spec = TableInput(f"file://{path}")
    start = pin(spec)
    for sql in history:
        spark.sql(sql.format(t=t))
    with pytest.raises(TableInputError) as refused:
        changes(spec, start, pin(spec))
    text = str(refused.value)
    assert "\n" not in text and path not in text and "VACUUM" in text, text
    assert "start its state afresh" in text
