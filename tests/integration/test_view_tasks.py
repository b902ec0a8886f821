"""View tasks on Spark: a view declared by its SQL over Delta tables that Spark writes
(deletion vectors, updates that move a row between groups, OPTIMIZE, several commits
between two epochs, epochs with no change), maintained by the runtime's view job with its
states as the task's checkpointed state, its output committed by the epoch. After every
epoch, each output table (read by delta-rs at its committed version) equals Spark's own
batch run of the view's query over the inputs at the versions the barrier pinned,
computed independently. A kill between the view's snapshot and its acknowledgement,
while the upstream moves on, doubles nothing; the refresh planner's choice and its
reason are in the state handle; verification catches a maintained result that drifted."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from checkpointing import Coordinator, LocalStorage
from checkpointing.protocol.barrier import plan_from_edges
from checkpointing.protocol.table_inputs import TableInput
from checkpointing.protocol.view_task import ViewTask
from spark_jobs.runtime import DeclineEpoch, Pipeline, drive_epoch
from spark_jobs.runtime.view_job import maintain_view
from tests.support.ivm_duckdb import _norm

EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "1"))
#: `make test` runs the rich history below; `make soak` (CKPT_HISTORY_EXAMPLES) draws too
PHASES = [Phase.explicit, *([Phase.generate] if "CKPT_HISTORY_EXAMPLES" in os.environ
                            else [])]

#: one view per kind of output: a keyed aggregate (merge), a join then an aggregate with a
#: distinct count (merge), a filter with no key (overwrite), a global aggregate (one row,
#: overwrite), a window function (no incremental rule: recomputed, overwrite)
VIEWS = {
    "per_customer": "SELECT customer, COUNT(*) AS n, SUM(amount) AS total, "
                    "MAX(amount) AS top, AVG(amount) AS mean FROM orders GROUP BY customer",
    "per_region": "SELECT c.region, SUM(o.amount) AS total, COUNT(DISTINCT o.customer) "
                  "AS buyers FROM orders o JOIN customers c ON o.customer = c.customer "
                  "GROUP BY c.region",
    "large": "SELECT id, customer, amount FROM orders WHERE amount >= 50",
    "overall": "SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders",
    "ranked": "SELECT customer, amount, ROW_NUMBER() OVER (PARTITION BY customer "
              "ORDER BY amount DESC, id) AS rk FROM orders",
    # views over a view: read from per_customer's change in the same epoch
    "regular": "SELECT customer, total FROM per_customer WHERE n >= 45",
    "summary": "SELECT COUNT(*) AS customers, MAX(top) AS top FROM per_customer",
}
#: the views' inputs that are views of the same DAG (name -> task)
OVER = {"regular": {"per_customer": "per_customer"}, "summary": {"per_customer": "per_customer"}}

#: Spark statements on the upstream tables; ``{o}`` orders, ``{c}`` customers
STATEMENTS = [
    "INSERT INTO {o} SELECT 1000 + CAST(rand() * 1e6 AS BIGINT), "
    "concat('c', CAST(id % 4 AS STRING)), id * 7 % 100 FROM range(0, 30)",
    "DELETE FROM {o} WHERE amount % 9 = 0",             # deletion vectors
    "UPDATE {o} SET amount = amount + 5 WHERE amount < 20",
    "UPDATE {o} SET customer = 'c5' WHERE customer = 'c1' AND amount > 60",  # moves groups
    "DELETE FROM {o} WHERE customer = 'c2'",
    "OPTIMIZE {o}",                                     # no change for a view
    "UPDATE {c} SET region = 'east' WHERE customer = 'c3'",
    "INSERT INTO {c} VALUES ('c5', 'west')",
    "DELETE FROM {c} WHERE customer = 'c0'",
]
OPS = st.sampled_from(STATEMENTS)
#: the history `make test` runs (Hypothesis's first drawn example is its simplest: epochs
#: with no statement): every kind of statement, two to four between epochs, an epoch with
#: none, the kill in the second epoch
RICH = [[STATEMENTS[0], STATEMENTS[1]], [STATEMENTS[2], STATEMENTS[3], STATEMENTS[6]],
        [], [STATEMENTS[5], STATEMENTS[4], STATEMENTS[7], STATEMENTS[8]]]


@pytest.fixture(scope="module", autouse=True)
def _few_batches():
    """A join's states merged into one every second epoch: both ways of keeping them
    (a batch added, the batches merged) run within a drawn history."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("spark_jobs.runtime.views.MAX_BATCHES", 2)
        yield


@pytest.fixture(scope="module")
def spark(connect_session):
    return connect_session


def _rows(records) -> Counter:
    return Counter(tuple(_norm(v) for v in r) for r in records)


def _pipeline(tmp, fail: dict, views: dict[str, str] = VIEWS, verify_every: int = 0
              ) -> Pipeline:
    inputs = {"orders": TableInput(f"file://{tmp}/bronze/orders"),
              "customers": TableInput(f"file://{tmp}/bronze/customers")}

    def job(run):
        result = maintain_view(run)
        if fail.pop(run.task_id, False):
            raise RuntimeError("killed after its state and output were written")
        return result

    tasks = {n: list(OVER.get(n, {}).values()) for n in views}
    specs = {n: ViewTask(sql, n, {"location": f"file://{tmp}/gold/{n}", "format": "delta"},
                         keys=("customer",) if n == "regular" else (),
                         verify_every=verify_every, views=OVER.get(n, {}))
             for n, sql in views.items()}
    plan = plan_from_edges(tasks, set(tasks), {n: {k: v for k, v in inputs.items()
                                                   if k in sql and n not in OVER}
                                               for n, sql in views.items()}, specs)
    return Pipeline(tasks, {n: job for n in views}, plan)


def _create(spark, tmp) -> tuple[str, str]:
    o, c = f"delta.`{tmp}/bronze/orders`", f"delta.`{tmp}/bronze/customers`"
    spark.sql(f"CREATE TABLE {o} (id BIGINT, customer STRING, amount DECIMAL(12, 2)) "
              "USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO {o} SELECT id, concat('c', CAST(id % 4 AS STRING)), "
              "id * 13 % 100 FROM range(0, 200, 1, 2)")
    spark.sql(f"CREATE TABLE {c} (customer STRING, region STRING) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO {c} VALUES ('c0', 'north'), ('c1', 'north'), ('c2', 'south'), "
              "('c3', 'west'), ('c4', 'south')")
    return o, c


def _check(spark, coord, tmp, epoch: int, views: dict[str, str] = VIEWS
           ) -> dict[str, Counter]:
    """Every view's committed table equals Spark's batch query at the pinned versions;
    returns the batch queries' rows."""
    barrier = coord.barrier(epoch)
    for name in ("orders", "customers"):
        v = barrier.table_version(name)
        if v is not None:
            spark.read.format("delta").option("versionAsOf", v.version) \
                .load(f"{tmp}/bronze/{name}").createOrReplaceTempView(name)
    spark.sql(VIEWS["per_customer"]).createOrReplaceTempView("per_customer")
    wanted = {}
    for n, sql in views.items():
        batch = spark.sql(sql)
        want = wanted[n] = _rows(batch.collect())
        got = DeltaTable(f"{tmp}/gold/{n}").to_pandas()
        assert _rows(got.itertuples(index=False)) == want, (n, epoch)
        # the batch query's types (an AVG of decimals is decimal(16,6), not the rules'
        # sum over a count)
        table = spark.read.format("delta").load(f"{tmp}/gold/{n}").schema
        assert [(f.name, f.dataType.simpleString()) for f in table.fields] == \
            [(f.name, f.dataType.simpleString()) for f in batch.schema.fields], (n, epoch)
    return wanted


@settings(max_examples=EXAMPLES, deadline=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@seed(20261206)
@given(epochs=st.lists(st.lists(OPS, min_size=0, max_size=3), min_size=3, max_size=4),
       kill=st.integers(min_value=1, max_value=3))
@example(epochs=RICH, kill=2)
def test_views_equal_their_batch_query_after_every_epoch(spark, tmp_path_factory, epochs,
                                                         kill):
    tmp = tmp_path_factory.mktemp("views")
    o, c = _create(spark, tmp)
    fail: dict = {}
    pipe = _pipeline(tmp, fail)
    coord = Coordinator(LocalStorage(tmp / "ckpt"), "views")
    epoch, meta = drive_epoch(pipe, coord, spark, "", "r0")
    assert meta is not None and meta.completed
    wanted = _check(spark, coord, tmp, epoch)
    batches: set[str] = set()
    for i, statements in enumerate(epochs, start=1):
        for s in statements:
            spark.sql(s.format(o=o, c=c))
        if i == kill:
            # the join's view killed between its snapshot and its acknowledgement; the
            # upstream moves on before the retry, which reads the same pinned change
            fail["per_region"] = True
            with pytest.raises(RuntimeError, match="killed"):
                drive_epoch(pipe, coord, spark, "", f"r{i}")
            spark.sql(f"DELETE FROM {o} WHERE amount % 10 = 1")
            epoch, meta = drive_epoch(pipe, coord, spark, "", f"r{i}", attempt=2)
        else:
            epoch, meta = drive_epoch(pipe, coord, spark, "", f"r{i}")
        assert meta is not None and meta.completed, meta
        now = _check(spark, coord, tmp, epoch)
        for n in VIEWS:
            view = coord.acknowledged_handle(epoch, n).metrics["view"]
            if not view["keys"] and wanted[n] - now[n]:
                # rows left the unkeyed view: its table is written whole again
                assert view["output_mode"] == "overwrite", (n, view)
            if n == "ranked":
                assert view["refresh"] == "full" and "window" in view["reason"].lower(), view
            elif n in OVER:
                pass  # its input changes whenever per_customer's result does
            elif not statements and kill not in (i, i - 1):  # (the kill's delete lands next)
                assert view["refresh"] == "incremental", view
                assert "no input changed" in view["reason"] or n == "per_region", view
        wanted = now
        files = [f.name for f in coord.acknowledged_handle(epoch, "per_region").files]
        batches.update(f.split("/")[2] for f in files
                       if re.match(r"view/s\d+_[lr]/b\d+/", f))
    # the join's states were kept as batches: more than one epoch wrote one
    assert len(batches) > 1, batches


def test_refresh_choices_are_recorded_and_an_unchanged_epoch_carries_its_states(
        spark, tmp_path):
    """The first epoch builds the states (full); before an incremental refresh was
    measured, a change larger than the threshold is recomputed (full) and a small one
    maintained (incremental); an epoch with no change carries every state file by
    reference; a DELETE of a few rows measures as their share of the files it touched;
    once both refreshes were measured, their costs decide, and the reason says so; the
    output is exact throughout."""
    o, _ = _create(spark, tmp_path)
    views = {"per_customer": VIEWS["per_customer"]}
    pipe = _pipeline(tmp_path, {}, views)
    coord = Coordinator(LocalStorage(tmp_path / "ckpt"), "views")

    def epoch(run: str) -> dict:
        e, meta = drive_epoch(pipe, coord, spark, "", run)
        assert meta is not None and meta.completed
        _check(spark, coord, tmp_path, e, views)
        return coord.acknowledged_handle(e, "per_customer")

    first = epoch("r0")
    assert first.metrics["view"]["refresh"] == "full"
    assert "first epoch" in first.metrics["view"]["reason"]
    spark.sql(f"INSERT INTO {o} SELECT id + 10000, 'c9', 1 FROM range(0, 5000, 1, 4)")
    big = epoch("r1")
    assert big.metrics["view"]["refresh"] == "full", big.metrics
    assert "no cost recorded yet" in big.metrics["view"]["reason"], big.metrics
    spark.sql(f"INSERT INTO {o} VALUES (5000, 'c1', 3)")
    small = epoch("r2")
    assert small.metrics["view"]["refresh"] == "incremental", small.metrics
    assert "of the inputs' bytes" in small.metrics["view"]["reason"]
    same = epoch("r3")
    assert same.metrics["view"]["refresh"] == "incremental"
    assert same.metrics["view"]["state_bytes_carried"] > 0
    # every state file carried as it was, but the change of the epoch before (none now)
    assert {f.name: f.sha256 for f in same.files} == {
        f.name: f.sha256 for f in small.files if not f.name.startswith("view/change/")}
    # a DELETE of two rows gives both of the table's first files a deletion vector: the
    # change is those rows' share of the files (under 5 %), not the files' bytes; both
    # refreshes were measured now: their costs decide, and the reason says so
    spark.sql(f"DELETE FROM {o} WHERE id IN (7, 150)")
    few = epoch("r4").metrics["view"]
    assert 0 < few["changed_bytes"] * 20 < few["input_bytes"], few
    assert "from earlier epochs' costs" in few["reason"], few
    assert few["estimated_full_ms"] > 0 and few["estimated_incremental_ms"] > 0


def test_an_unkeyed_view_s_table_grows_by_the_rows_an_epoch_adds(spark, tmp_path):
    """A view without a key (a filter) over an input that only grew: its table keeps its
    files and the epoch commits only the rows added (no file removed); an epoch with no
    change commits no file; a DELETE upstream writes the whole result again; the table
    equals the batch query throughout."""
    from spark_jobs.runtime.view_job import GROWN

    o, _ = _create(spark, tmp_path)
    spark.sql(f"INSERT INTO {o} SELECT id + 1000, concat('c', CAST(id % 4 AS STRING)), "
              "id * 13 % 100 FROM range(0, 3000, 1, 2)")
    views = {"large": VIEWS["large"]}
    pipe = _pipeline(tmp_path, {}, views)
    coord = Coordinator(LocalStorage(tmp_path / "ckpt"), "views")
    table = f"{tmp_path}/gold/large"

    def epoch(run: str) -> tuple[str, set[str], set[str]]:
        before = set(DeltaTable(table).file_uris()) if run != "r0" else set()
        e, meta = drive_epoch(pipe, coord, spark, "", run)
        assert meta is not None and meta.completed
        _check(spark, coord, tmp_path, e, views)
        after = set(DeltaTable(table).file_uris())
        return coord.acknowledged_handle(e, "large").metrics["view"]["output_mode"], \
            before, after

    assert epoch("r0")[0] == "overwrite"
    spark.sql(f"INSERT INTO {o} SELECT 9000 + id, 'c1', 50 + id FROM range(0, 5)")
    mode, before, after = epoch("r1")
    assert mode == GROWN and before < after, (mode, before, after)
    grown = after - before
    mode, before, after = epoch("r2")  # no change
    assert mode == GROWN and before == after
    spark.sql(f"INSERT INTO {o} SELECT 9100 + id, 'c2', id FROM range(0, 40)")
    mode, before, after = epoch("r3")
    assert mode == GROWN and before < after and not grown & (after - before)
    spark.sql(f"DELETE FROM {o} WHERE id = 9000")
    mode, before, after = epoch("r4")
    assert mode == "overwrite" and not before & after


def test_a_declared_key_with_two_rows_fails_the_task_naming_it(spark, tmp_path):
    """``keys=`` is the user's word that the columns identify a row: a view whose declared
    key has two rows fails its task in one line naming the key and a value of it, before
    anything is staged for the epoch."""
    from spark_jobs.runtime.view_job import ViewJobError

    _create(spark, tmp_path)
    view = ViewTask("SELECT customer, amount FROM orders", "amounts",
                    {"location": f"file://{tmp_path}/gold/amounts", "format": "delta"},
                    keys=("customer",))
    plan = plan_from_edges({"amounts": []}, {"amounts"},
                           {"amounts": {"orders": TableInput(f"file://{tmp_path}/bronze/orders")}},
                           {"amounts": view})
    coord = Coordinator(LocalStorage(tmp_path / "ckpt"), "keys")
    with pytest.raises(ViewJobError) as err:
        drive_epoch(Pipeline({"amounts": []}, {"amounts": maintain_view}, plan), coord, spark,
                    "", "r0")
    line = str(err.value)
    assert "\n" not in line and line.startswith(
        "view amounts: the key (customer) is not unique: (customer='c"), line
    assert line.endswith("has several rows; declare keys= that identify a row of the view")


def test_verification_declines_an_epoch_whose_maintained_result_drifted(spark, tmp_path,
                                                                        monkeypatch):
    """With ``verify_every=1`` each epoch recomputes the view at the pinned versions and
    compares it with the maintained result: a maintenance that lost a group (a bug put in
    by the test: the kept result drops customer c1's row) declines the epoch in one line
    naming the first differing rows."""
    from spark_jobs.runtime import view_job

    o, _ = _create(spark, tmp_path)
    views = {"per_customer": VIEWS["per_customer"]}
    pipe = _pipeline(tmp_path, {}, views, verify_every=1)
    coord = Coordinator(LocalStorage(tmp_path / "ckpt"), "views")
    for name in ("orders", "customers", "per_customer"):  # the module's checks' batch reads
        spark.catalog.dropTempView(name)
    e, meta = drive_epoch(pipe, coord, spark, "", "r0")
    assert meta is not None and meta.completed
    assert coord.acknowledged_handle(e, "per_customer").metrics["view"]["verified_ms"] > 0
    # the verification's query read the inputs by name; the session keeps none of them
    left = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    assert "orders" not in left, left
    save = view_job.TaskStates.save

    def lossy(self, name, df):
        if name.endswith(view_job.RESULT):
            df = df.where("customer <> 'c1'")
        return save(self, name, df)

    def lossy_batch(self, name, saved, whole):  # the result kept whole, c1 lost
        return lossy(self, name, whole)

    monkeypatch.setattr(view_job.TaskStates, "save", lossy)
    monkeypatch.setattr(view_job.TaskStates, "append_saved", lossy_batch)
    spark.sql(f"INSERT INTO {o} VALUES (7000, 'c1', 3)")
    with pytest.raises(DeclineEpoch, match="verification failed") as declined:
        drive_epoch(pipe, coord, spark, "", "r1")
    assert "\n" not in str(declined.value)
    assert "missing (customer='c1'" in str(declined.value), declined.value
