"""tpch_daily at a small scale factor, on the tests' Spark Connect server: the bulk history
then daily epochs with deletion days, each published output equal to DuckDB's computation
over tpchgen-cli's own files; a run killed mid-epoch (SIGKILL) and run again counts nothing
twice; a compaction of the customer state leaves the outputs unchanged; a missing or
failing generator is one clear line; a state of another layout is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.harness import tpch_oracle as oracle
from bench.harness.oracle import published
from checkpointing import Coordinator, LocalStorage
from spark_jobs.runtime import partition_value
from spark_jobs.tpch import jobs
from spark_jobs.tpch.jobs import days_of
from spark_jobs.tpch.landing import LandingError, generate, land
from spark_jobs.tpch.pipeline import run_epoch
from tests.support.helpers import sigkill_mid_epoch_then_rerun

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SCALE = 0.01
HISTORY_UNTIL = date(1998, 6, 1)
DAYS = 4


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    """(data storage, generated directory, what was landed): SF 0.01, history before
    1998-06-01, four daily files, five old orders deleted every second day."""
    tmp = tmp_path_factory.mktemp("tpch")
    cache = tmp / "cache"
    data = LocalStorage(tmp / "data")
    landed = land(data, SCALE, HISTORY_UNTIL, DAYS, delete_every=2, deletes=5, cache=cache)
    return data, generate(SCALE, cache), landed


@pytest.fixture(scope="module")
def spark(spark_connect):
    from spark_jobs.runtime import spark_session

    return spark_session("tpch-tests", remote=spark_connect.url)


def _own_data(data: LocalStorage, tmp_path: Path) -> LocalStorage:
    """A copy of the landed data for one test: the tables live under the data root, and
    two pipelines must not commit into the same tables."""
    shutil.copytree(data.root, tmp_path / "data")
    return LocalStorage(tmp_path / "data")


def _until(i: int) -> str:
    return (HISTORY_UNTIL + timedelta(days=i)).isoformat()


def _interval(i: int) -> dict[str, str]:
    return {"start": _until(i - 1), "end": _until(i)}


def _deleted(landed, until: str) -> list[int]:
    return sorted(k for d, keys in landed.deletes.items() if d < until for k in keys)


def _written(before, after) -> set[str]:
    """Names of ``after``'s orders/ files that ``before`` did not have (written, not
    carried by reference)."""
    had = {f.sha256 for f in before.files} if before else set()
    return {f.name for f in after.files if f.name.startswith("orders/") and f.sha256 not in had}


def _history_months() -> set[str]:
    """The months of the history's order days (before HISTORY_UNTIL)."""
    d, out = date(1992, 1, 1), set()
    while d < HISTORY_UNTIL:
        out.add(d.isoformat()[:7])
        d += timedelta(days=28)
    return out


def test_history_then_daily_epochs_equal_duckdb(tpch, spark, tmp_path, monkeypatch):
    data, generated, landed = tpch
    data = _own_data(data, tmp_path)
    monkeypatch.setattr(jobs, "MAX_RUNS", 3)  # a compaction within these epochs
    monkeypatch.setattr(jobs, "MAX_DELETE_BATCHES", 1)  # the second deletion day merges
    # The first deletion day finds its five orders through a filter of three ORed lists,
    # the second (more keys than MAX_PUSHED_KEYS) through one IN read over the buckets whole.
    monkeypatch.setattr(jobs, "PUSHED_IN_VALUES", 2)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "tpch_daily")
    for i in range(DAYS + 1):
        if i == DAYS:
            monkeypatch.setattr(jobs, "MAX_PUSHED_KEYS", 4)
        epoch, meta = run_epoch(c, spark, data.uri(""), f"d{i}", data_interval=_interval(i))
        assert meta.completed
        oracle.check_published(c, generated, _until(i), _deleted(landed, _until(i)))
    assert _deleted(landed, _until(DAYS)), "no deletion day was run"

    # The history's days are kept a month to a bucket: tens of files, not thousands.
    ingests = {e: c.completed_handles(e)["ingest"] for e in c.epoch_ids()}
    first = _written(None, ingests[1])
    assert {partition_value(n) for n in first} == _history_months()
    # Written to be searched by order key: a bloom filter on it, no dictionary.
    bucket = next(f for f in ingests[1].files if f.name.startswith("orders/"))
    meta = pq.ParquetFile(pa.BufferReader(c.storage.read(c.storage.key_for_uri(
        bucket.uri))[0])).metadata
    key = next(meta.row_group(0).column(j) for j in range(meta.num_columns)
               if meta.row_group(0).column(j).path_in_schema == "o_orderkey")
    assert key.bloom_filter_offset and not any("DICTIONARY" in e for e in key.encodings)

    # Each month bucket's rows by day, each run of customer revenue by customer: the
    # partitioned writes keep the order asked of them (write_state's sort_by).
    def column(ref, name):
        return pq.read_table(pa.BufferReader(c.storage.read(c.storage.key_for_uri(
            ref.uri))[0]), columns=[name]).column(name).to_pylist()

    buckets = [f for f in ingests[1].files if f.name.startswith("orders/")]
    assert all(column(f, "day") == sorted(column(f, "day")) for f in buckets)
    assert any(len(set(column(f, "day"))) > 1 for f in buckets)
    customer_runs = c.completed_handles(c.epoch_ids()[-1])["top_customers"].files
    assert customer_runs and all(column(f, "o_custkey") == sorted(column(f, "o_custkey"))
                                 for f in customer_runs)
    # A daily epoch rebuilt its own day only: the others were referenced, not rewritten.
    h = ingests[2]  # the epoch of the first day after the history
    assert h.metrics["days_touched"] == [[_until(0), _until(0)]]
    assert {partition_value(n) for n in _written(ingests[1], h)} == {_until(0)}
    day = [f for f in h.files if f.name.startswith("orders/") and _until(0) in f.name]
    assert h.metrics["bytes_referenced"] > 20 * sum(f.size for f in day) > 0
    # A deletion day wrote its own day and the deleted orders' rows as retracted: the
    # buckets holding those orders were carried as they were (the delete file masks them).
    dels = [e for e in sorted(ingests)[1:] if ingests[e].row_counts["orders_deleted"]]
    assert dels, "no deletion epoch"
    for e in dels:
        d = ingests[e]
        assert d.row_counts["orders_deleted"] == 5
        assert {partition_value(n) for n in _written(ingests[e - 1], d)} \
            == days_of(d.metrics["days_touched"])
        assert d.metrics["days_retracted"]
    # The deleted keys: a batch for the first deletion day, then merged into one file that
    # holds every key deleted so far.
    batches = [[f for f in ingests[e].files if f.name.startswith("deleted/")] for e in dels]
    assert [len(b) for b in batches] == [1, 1] and batches[0][0].uri != batches[1][0].uri
    ref = batches[1][0]
    merged = pq.read_table(pa.BufferReader(c.storage.read(c.storage.key_for_uri(ref.uri))[0]))
    merged = merged.column("o_orderkey").to_pylist()
    assert sorted(merged) == _deleted(landed, _until(dels[1] - 1))
    runs = [c.completed_handles(e)["top_customers"] for e in c.epoch_ids()[-4:]]
    assert any(r.metrics["compacted"] for r in runs)
    assert all(r.row_counts["runs"] <= jobs.MAX_RUNS for r in runs)

    # A compaction epoch with no new input leaves every output as it was.
    monkeypatch.setattr(jobs, "MAX_RUNS", 1)
    before = {o: published(c, o) for o in ("tpch_q1_pricing", "tpch_top_customers")}
    epoch, meta = run_epoch(c, spark, data.uri(""), "again", data_interval=_interval(DAYS))
    assert c.completed_handles(epoch)["top_customers"].metrics["compacted"]
    assert c.completed_handles(epoch)["top_customers"].row_counts["runs"] == 1
    for o, frame in before.items():
        assert published(c, o).sort_values(list(frame.columns)).reset_index(drop=True) \
            .equals(frame.sort_values(list(frame.columns)).reset_index(drop=True)), o
    oracle.check_published(c, generated, _until(DAYS), _deleted(landed, _until(DAYS)))


def _land_day_again(data: LocalStorage, generated: Path, day: str) -> None:
    """A late file for a day the history already held: the generator's orders of ``day``
    and their line items, landed as that day's files (the same rows)."""
    import pyarrow.compute as pc

    from spark_jobs.tpch.landing import _plain

    orders = _plain(pq.read_table(generated / "orders.parquet"))
    orders = orders.filter(pc.equal(orders["o_orderdate"], pa.scalar(date.fromisoformat(day))))
    lines = _plain(pq.read_table(generated / "lineitem.parquet"))
    lines = lines.filter(pc.is_in(lines["l_orderkey"], orders["o_orderkey"]))
    for name, table in (("orders", orders), ("lineitem", lines)):
        pq.write_table(table, data.root / "raw" / name / f"{day}.parquet")


def _order_days(generated: Path) -> dict[int, date]:
    orders = pq.read_table(generated / "orders.parquet", columns=["o_orderkey", "o_orderdate"])
    return {r["o_orderkey"]: r["o_orderdate"] for r in orders.to_pylist()}


def _land_deletes(data: LocalStorage, day: str, keys: list[int], day_of: dict[int, date]
                  ) -> None:
    """A deletion file for ``day`` naming ``keys`` (repeats kept), with their order days."""
    pq.write_table(pa.table({"o_orderkey": pa.array(keys, pa.int64()),
                             "o_orderdate": pa.array([day_of[k] for k in keys], pa.date32())}),
                   data.root / "raw" / "deletes" / f"{day}.parquet")


def test_a_late_file_for_a_history_day_rebuilds_its_month(tpch, spark, tmp_path):
    """A day of the history landed again as a day file (with a deletion day in the same
    epoch): that day's month bucket is rebuilt with the day's rows replaced, nothing else
    of the history is written, and the outputs still equal DuckDB's (a rebuild that kept
    the day's old rows would count it twice). Then a deletion file that repeats the
    deletions already applied, and names a new order twice: only the new order is
    retracted, once."""
    data, generated, landed = tpch
    data = _own_data(data, tmp_path)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "tpch_daily")
    for i in range(2):
        run_epoch(c, spark, data.uri(""), f"d{i}", data_interval=_interval(i))
    _land_day_again(data, generated, "1995-03-15")
    epoch, meta = run_epoch(c, spark, data.uri(""), "d2", data_interval=_interval(2))
    assert meta.completed
    h, before = c.completed_handles(epoch)["ingest"], c.completed_handles(epoch - 1)["ingest"]
    assert {partition_value(n) for n in _written(before, h)} == {"1995-03", _until(1)}
    assert days_of(h.metrics["days_touched"]) == {"1995-03-15", _until(1)}
    oracle.check_published(c, generated, _until(2), _deleted(landed, _until(2)))

    again = _deleted(landed, _until(2))
    assert again, "no deletion before"
    day_of = _order_days(generated)
    new = next(k for k, d in sorted(day_of.items())
               if d < HISTORY_UNTIL and k not in again and d.isoformat() != "1995-03-15")
    _land_deletes(data, _until(2), [*again, new, new], day_of)
    epoch, meta = run_epoch(c, spark, data.uri(""), "d3", data_interval=_interval(3))
    assert meta.completed
    oracle.check_published(c, generated, _until(3), [*again, new])
    h = c.completed_handles(epoch)["ingest"]
    assert h.row_counts["orders_deleted"] == 1
    assert days_of(h.metrics["days_retracted"]) == {day_of[new].isoformat()}


def test_killed_epoch_run_again_counts_nothing_twice(tpch, spark, spark_connect, tmp_path):
    """The embedded runner SIGKILLed after a task acknowledged a daily epoch (a deletion
    day), run again with the same run id: it resumes the epoch, and the outputs equal
    DuckDB's (a retry that double counted the day or the deletions would differ)."""
    data, generated, landed = tpch
    data = _own_data(data, tmp_path)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "tpch_daily")
    for i in range(2):
        run_epoch(c, spark, data.uri(""), f"d{i}", data_interval=_interval(i))
    args = [sys.executable, "-m", "spark_jobs.runtime.run_epoch", "--jobs",
            "spark_jobs.tpch.pipeline:PIPELINE", "--pipeline", "tpch_daily", "--storage",
            f"file://{tmp_path}/ckpt", "--data", data.uri(""), "--run-id", "d2",
            "--until", _until(2), "--remote", spark_connect.url]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sigkill_mid_epoch_then_rerun(args, env, c, 3)
    assert c.completed_handles(3)["ingest"].attempt == 1  # not run again
    oracle.check_published(c, generated, _until(2), _deleted(landed, _until(2)))


def test_a_state_of_another_layout_is_refused_and_kept(tpch, spark, tmp_path, monkeypatch):
    """A history epoch whose contributions are in another layout (as an earlier version
    wrote them): the next epoch is declined with one line naming the way forward, and
    neither the state nor the published tables change."""
    from spark_jobs.runtime import DeclineEpoch

    data, generated, landed = tpch
    data = _own_data(data, tmp_path)
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "tpch_daily")
    with monkeypatch.context() as m:
        m.setattr(jobs, "LAYOUT", 1)
        epoch, meta = run_epoch(c, spark, data.uri(""), "d0", data_interval=_interval(0))
    assert meta.completed and c.completed_handles(epoch)["ingest"].metrics["layout"] == 1
    before = {o: published(c, o) for o in ("tpch_q1_pricing", "tpch_top_customers")}
    with pytest.raises(DeclineEpoch) as exc:
        run_epoch(c, spark, data.uri(""), "d1", data_interval=_interval(1))
    line = str(exc.value)
    assert f"another layout (1, this code's is {jobs.LAYOUT})" in line
    assert "start tpch_daily afresh" in line
    assert "\n" not in line and str(tmp_path) not in line
    meta = c.metadata(c.epoch_ids()[-1])
    assert (meta.status, meta.reason, meta.declined_by) == ("aborted", "declined", "ingest")
    assert c.completed_handles(epoch)["ingest"].metrics["layout"] == 1
    for o, frame in before.items():
        assert published(c, o).equals(frame), o


def _contributions_of(spark, data):
    from types import SimpleNamespace

    keys = [o.key for o in data.list("raw/") if o.key.endswith(".parquet")]
    return jobs._contributions(SimpleNamespace(spark=spark, data_root=data),
                               [k for k in keys if k.startswith("raw/orders/")],
                               [k for k in keys if k.startswith("raw/lineitem/")])


def test_line_items_are_shuffled_once_and_deduplicated_by_hash(tpch, spark):
    """The contributions' plan: the line items' one exchange is by order key, which the
    dedup on (order key, line number), the join and the per-order aggregation all reuse,
    and the dedup is a hash aggregation (its flags as code points), not a sort."""
    import re

    data, _, _ = tpch
    plan = _contributions_of(spark, data)._explain_string(extended=False)
    exchanges = re.findall(r"Exchange hashpartitioning\(([^)]*)\)", plan)
    by_line_key = [e for e in exchanges if "l_" in e]
    assert len(by_line_key) == 1 and re.match(r"l_orderkey#\d+L?, \d+$", by_line_key[0]), plan
    assert not any("o_custkey" in e for e in exchanges), plan  # no exchange for the aggregate
    dedup = [ln for ln in plan.splitlines() if "Aggregate" in ln and "l_linenumber" in ln
             and "first(" in ln]
    assert dedup and all("HashAggregate" in ln for ln in dedup), plan


def test_a_line_item_flag_of_more_than_one_character_fails_with_its_value(tpch, spark,
                                                                           tmp_path):
    data = _own_data(tpch[0], tmp_path)
    key = next(o.key for o in data.list("raw/lineitem/") if o.key.endswith(".parquet"))
    table = pq.read_table(data.root / key)
    flags = table.column("l_returnflag").to_pylist()
    table = table.set_column(table.schema.get_field_index("l_returnflag"), "l_returnflag",
                             pa.array(["RX"] + flags[1:], table.schema.field(
                                 "l_returnflag").type))
    pq.write_table(table, data.root / key)
    with pytest.raises(Exception, match=r"line item l_returnflag 'RX' is not one ASCII "
                                         r"character \(TPC-H's CHAR\(1\)\)"):
        _contributions_of(spark, data).count()


def test_missing_or_failing_generator_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TPCHGEN_CLI", str(tmp_path / "no-such-tpchgen"))
    with pytest.raises(LandingError, match=r"^tpchgen-cli not found .*pip install "
                                           r"tpchgen-cli==4\.0\.0"):
        generate(0.01, tmp_path / "cache")
    monkeypatch.setenv("TPCHGEN_CLI", "/bin/false")
    with pytest.raises(LandingError, match=r"^tpchgen-cli failed \(exit 1\) at scale factor "
                                           r"0\.01"):
        generate(0.01, tmp_path / "cache")
    r = subprocess.run([sys.executable, "-m", "spark_jobs.tpch.landing", "--data",
                        f"file://{tmp_path}/data", "--scale", "0.01", "--cache",
                        str(tmp_path / "cache")], capture_output=True, text=True,
                       env={**os.environ, "TPCHGEN_CLI": "/bin/false"}, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "tpchgen-cli failed" in r.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.parquet"))
