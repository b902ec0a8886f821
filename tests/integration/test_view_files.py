"""Views over landed files (PROTOCOL 6.15, 1.27) on Spark: a view task whose input is CSV
files landed under a prefix of the data root, beside a Delta table input, maintained by the
runtime's view job. Hypothesis draws histories of landings between epochs (new days, files
rewritten in place with other rows, late files for an earlier day, a file whose name Spark
percent-encodes, a change of the table input, epochs with nothing new) and a kill of a view
between its snapshot and its acknowledgement, after which a correction lands before the
retry. After every epoch, each view's committed table equals Spark's own batch run of the
view's query over the files' latest contents and the table at its pinned version, computed
independently."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from checkpointing import Coordinator, FileInput, LocalStorage
from checkpointing.protocol.barrier import plan_from_edges
from checkpointing.protocol.table_inputs import TableInput
from checkpointing.protocol.view_task import ViewTask
from spark_jobs.runtime import Pipeline, drive_epoch
from spark_jobs.runtime.view_job import maintain_view
from tests.support.ivm_duckdb import _norm

EXAMPLES = int(os.environ.get("CKPT_HISTORY_EXAMPLES", "1"))
PHASES = [Phase.explicit, *([Phase.generate] if "CKPT_HISTORY_EXAMPLES" in os.environ
                            else [])]
SCHEMA = "id BIGINT, customer STRING, amount DECIMAL(12,2)"
PREFIX = "landing/orders/"
#: a keyed aggregate (merge), a filter without a key (grown or overwritten), a join of the
#: files with the table input, then an aggregate
VIEWS = {
    "per_customer": "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders "
                    "GROUP BY customer",
    "large": "SELECT id, customer, amount FROM orders WHERE amount >= 50",
    "per_region": "SELECT c.region, SUM(o.amount) AS total FROM orders o "
                  "JOIN customers c ON o.customer = c.customer GROUP BY c.region",
}

#: between two epochs: land the next day's file; rewrite a landed file with other rows;
#: land a file for a day before the newest (late); a file whose name has a space; move a
#: customer to another region (the table input)
OPS = st.sampled_from(["land", "correct", "late", "spaced", "region"])


@pytest.fixture(scope="module")
def spark(connect_session):
    return connect_session


def _rows(records) -> Counter:
    return Counter(tuple(_norm(v) for v in r) for r in records)


class Landing:
    """The landing zone the history writes: CSV files under ``PREFIX`` of the data root."""

    def __init__(self, root: Path):
        self.dir = root / PREFIX
        self.dir.mkdir(parents=True)
        self.days: list[int] = []
        self.n = 0

    def write(self, name: str, count: int) -> None:
        lines = ["id,customer,amount"]
        for _ in range(count):
            self.n += 1
            lines.append(f"{self.n},c{self.n * 7 % 5},{self.n * 37 % 100}.{self.n % 10}5")
        (self.dir / name).write_text("\n".join(lines) + "\n")

    def apply(self, op: str, spark, customers: str) -> None:
        if op == "land" or (op in ("correct", "late") and not self.days):
            day = max(self.days, default=0) + 2  # leaves a day for a late file
            self.days.append(day)
            self.write(f"2013-01-{day:02d}.csv", 6)
        elif op == "correct":  # the same file, other rows (fewer or more)
            day = self.days[self.n % len(self.days)]
            self.write(f"2013-01-{day:02d}.csv", 2 + self.n % 7)
        elif op == "late":
            free = [d for d in range(1, max(self.days)) if d not in self.days]
            if free:
                self.days.append(free[0])
                self.write(f"2013-01-{free[0]:02d}.csv", 3)
        elif op == "spaced":
            self.write(f"extra {self.n}%.csv", 4)
        else:
            spark.sql(f"UPDATE {customers} SET region = CASE region WHEN 'north' THEN 'south' "
                      f"ELSE 'north' END WHERE customer = 'c{self.n % 5}'")


def _pipeline(tmp: Path, fail: dict) -> Pipeline:
    customers = {"customers": TableInput(f"file://{tmp}/bronze/customers")}

    def job(run):
        result = maintain_view(run)
        if fail.pop(run.task_id, False):
            raise RuntimeError("killed after its state and output were written")
        return result

    files = {"orders": FileInput(PREFIX, SCHEMA)}
    specs = {n: ViewTask(sql, n, {"location": f"file://{tmp}/gold/{n}", "format": "delta"},
                         files=files) for n, sql in VIEWS.items()}
    tasks: dict[str, list[str]] = {n: [] for n in VIEWS}
    plan = plan_from_edges(tasks, set(tasks), {n: customers if "customers" in sql else {}
                                               for n, sql in VIEWS.items()}, specs)
    return Pipeline(tasks, {n: job for n in VIEWS}, plan)


def _check(spark, coord, tmp: Path, epoch: int, earlier: Path | None = None) -> None:
    """Every view's table equals its query over the files as they are now (Spark's own
    CSV reader) and the customers at the version the epoch pinned. A file input is read
    when its task runs, not pinned by the barrier: a view that acknowledged the epoch's
    first attempt read the files as they were then (``earlier``, a copy)."""
    v = coord.barrier(epoch).table_version("customers")
    spark.read.format("delta").option("versionAsOf", v.version) \
        .load(f"{tmp}/bronze/customers").createOrReplaceTempView("customers")
    for n, sql in VIEWS.items():
        first = coord.acknowledged_handle(epoch, n).attempt == 1
        landed = earlier if earlier is not None and first else tmp / "data" / PREFIX
        spark.read.format("csv").schema(SCHEMA).option("header", "true") \
            .load(str(landed)).createOrReplaceTempView("orders")
        got = DeltaTable(f"{tmp}/gold/{n}").to_pandas()
        assert _rows(got.itertuples(index=False)) == _rows(spark.sql(sql).collect()), (n, epoch)


@settings(max_examples=EXAMPLES, deadline=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@seed(20261206)
@given(epochs=st.lists(st.lists(OPS, min_size=0, max_size=3), min_size=3, max_size=5),
       kill=st.integers(min_value=1, max_value=3))
# `make test` runs this history of every kind (Hypothesis's first draw is its simplest,
# epochs with nothing landed); `make soak` draws more
@example(epochs=[["land", "correct"], ["late", "spaced", "region"], [],
                 ["correct", "land", "spaced"], ["late", "correct"]], kill=2)
def test_views_over_files_equal_their_batch_query_after_every_epoch(spark, tmp_path_factory,
                                                                    epochs, kill):
    tmp = tmp_path_factory.mktemp("files")
    customers = f"delta.`{tmp}/bronze/customers`"
    spark.sql(f"CREATE TABLE {customers} (customer STRING, region STRING) USING delta")
    spark.sql(f"INSERT INTO {customers} VALUES ('c0', 'north'), ('c1', 'north'), "
              "('c2', 'south'), ('c3', 'south'), ('c4', 'west')")
    landing = Landing(tmp / "data")
    landing.apply("land", spark, customers)
    fail: dict = {}
    pipe = _pipeline(tmp, fail)
    coord = Coordinator(LocalStorage(tmp / "ckpt"), "files")
    data = f"file://{tmp}/data"
    epoch, meta = drive_epoch(pipe, coord, spark, data, "r0")
    assert meta is not None and meta.completed
    _check(spark, coord, tmp, epoch)
    for i, ops in enumerate(epochs, start=1):
        for op in ops:
            landing.apply(op, spark, customers)
        earlier = None
        if i == kill:
            fail["per_region"] = True
            earlier = tmp / f"landed-{i}"
            shutil.copytree(landing.dir, earlier)
            with pytest.raises(RuntimeError, match="killed"):
                drive_epoch(pipe, coord, spark, data, f"r{i}")
            landing.apply("correct", spark, customers)  # lands before the retry
            epoch, meta = drive_epoch(pipe, coord, spark, data, f"r{i}", attempt=2)
            assert coord.acknowledged_handle(epoch, "per_region").attempt == 2
        else:
            epoch, meta = drive_epoch(pipe, coord, spark, data, f"r{i}")
        assert meta is not None and meta.completed, meta
        _check(spark, coord, tmp, epoch, earlier)
        if not ops and kill not in (i, i - 1):
            for n in VIEWS:
                view = coord.acknowledged_handle(epoch, n).metrics["view"]
                assert view["refresh"] == "incremental" and "no input changed" in \
                    view["reason"], (n, view)


def test_a_file_input_is_declared_with_a_reader_and_a_schema():
    """Refused when declared: another format, a prefix outside the data root, no schema;
    the declaration goes through the plan's JSON unchanged."""
    for kwargs, message in (({"format": "xml"}, "format is one of"),
                            ({"prefix": "../up/"}, "inside the data root"),
                            ({"schema": " "}, "needs its schema")):
        with pytest.raises(ValueError, match=message):
            FileInput(**{"prefix": PREFIX, "schema": SCHEMA, **kwargs})
    view = ViewTask(VIEWS["large"], "large", {"location": "file:///tmp/x"},
                    files={"orders": FileInput(PREFIX, SCHEMA, "csv", {"sep": ";"})})
    assert ViewTask.from_json(view.to_json()) == view
    assert view.files["orders"].reader_options == {"header": "true", "sep": ";"}
