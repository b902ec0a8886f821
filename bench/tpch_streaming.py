"""tpch_daily's control in Spark Structured Streaming
(``tpch_vs_structured_streaming_daily_ratio``): the same landed Parquet files, the same three
aggregates, each a streaming query with its own state store (RocksDB) and checkpoint,
``Trigger.AvailableNow``, one day's files arriving per run.

What the streaming version is, written as a Spark user would:

- **Q1 pricing**: a streaming aggregation over the line items (complete mode, 4 groups).
- **Revenue per nation and order day** and **revenue per customer (top N)**: a
  stream-stream inner join of orders and line items on the order key, then the customer and
  supplier dimensions (stream-static joins), appended to a Parquet sink; two streaming
  aggregations read that sink (complete mode; the top N sorted and limited, which complete
  mode allows). Spark refuses a stream-stream join followed by an aggregation in one query
  (complete and update modes), and one query cannot hold two aggregations.
- The join has no watermark (a line item's order can be any age), so its state holds every
  order and line item: what Spark keeps for an unbounded join. RocksDB holds it on disk.

What it leaves out, in its favour: no deduplication (the landed files have no duplicates),
and no deletions: an append-only stream cannot retract an order, so only days without a
deletion file are compared, and results are checked against DuckDB with no deletions.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _link(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)  # the same bytes, as a new file in the stream's directory
    except OSError:
        shutil.copyfile(src, dest)


class StreamingControl:
    """Four AvailableNow queries over ``work/src`` (files linked from a landed data root),
    checkpointed under ``work/chk``: the join into ``work/joined``, and the aggregates in
    memory tables ``ss_q1/ss_q5/ss_top``."""

    def __init__(self, spark: Any, data_root: Path, work: Path, top_n: int,
                 q1_shipdate_max: str) -> None:
        self.spark, self.data_root, self.work = spark, data_root, work
        self.src, self.chk = work / "src", work / "chk"
        self.top_n, self.q1_max = top_n, q1_shipdate_max

    def stage_history(self) -> int:
        """Link the bulk history files; return how many."""
        files = [p for t in ("orders", "lineitem")
                 for p in sorted((self.data_root / "raw" / t).glob("history-*.parquet"))]
        for p in files:
            _link(p, self.src / p.parent.name / p.name)
        return len(files)

    def stage_day(self, day: str) -> None:
        for t in ("orders", "lineitem"):
            p = self.data_root / "raw" / t / f"{day}.parquet"
            if p.exists():
                _link(p, self.src / t / p.name)

    def _streams(self) -> tuple[Any, Any, Any, Any]:
        sp = self.spark
        schema = {t: sp.read.parquet(str(next((self.src / t).glob("*.parquet")))).schema
                  for t in ("orders", "lineitem")}
        orders = sp.readStream.schema(schema["orders"]).parquet(str(self.src / "orders"))
        lines = sp.readStream.schema(schema["lineitem"]).parquet(str(self.src / "lineitem"))
        dim = self.data_root / "dim"
        customer = sp.read.parquet(str(dim / "customer.parquet"))
        supplier = sp.read.parquet(str(dim / "supplier.parquet"))
        return orders, lines, customer, supplier

    def run(self) -> float:
        """One AvailableNow run of the four queries (everything staged and not yet
        consumed), in dependency order: seconds."""
        from pyspark.sql import functions as F

        sp = self.spark
        sp.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        orders, lines, customer, supplier = self._streams()
        disc = F.col("l_extendedprice") * (F.lit(1) - F.col("l_discount"))
        q1 = (lines.where(F.col("l_shipdate") <= F.lit(self.q1_max).cast("date"))
              .groupBy("l_returnflag", "l_linestatus")
              .agg(F.sum("l_quantity").alias("sum_qty"),
                   F.sum("l_extendedprice").alias("sum_base_price"),
                   F.sum(disc).alias("sum_disc_price"),
                   F.sum(disc * (F.lit(1) + F.col("l_tax"))).alias("sum_charge"),
                   F.count("*").alias("count_order")))
        joined = (lines.join(orders, F.col("l_orderkey") == F.col("o_orderkey"))
                  .join(F.broadcast(customer.select("c_custkey", "c_nationkey")),
                        F.col("o_custkey") == F.col("c_custkey"))
                  .join(F.broadcast(supplier.select("s_suppkey", "s_nationkey")),
                        F.col("l_suppkey") == F.col("s_suppkey"))
                  .select("o_custkey", "c_nationkey", "o_orderdate",
                          disc.alias("disc_price"),
                          (F.col("s_nationkey") == F.col("c_nationkey")).alias("local")))
        t0 = time.perf_counter()
        self._start(q1, "ss_q1")
        # A join cannot feed an aggregation in one query (complete and update modes refuse
        # a stream-stream join): the joined line items go to a Parquet sink (append), which
        # the two aggregations read as their stream, as a medallion pipeline would.
        (joined.writeStream.format("parquet").option("path", str(self.work / "joined"))
         .option("checkpointLocation", str(self.chk / "ss_join"))
         .trigger(availableNow=True).start().awaitTermination())
        rows = sp.readStream.schema(joined.schema).parquet(str(self.work / "joined"))
        self._start(rows.where("local").groupBy("c_nationkey", "o_orderdate")
                    .agg(F.sum("disc_price").alias("revenue")), "ss_q5")
        self._start(rows.groupBy("o_custkey").agg(F.sum("disc_price").alias("revenue"))
                    .orderBy(F.desc("revenue"), "o_custkey").limit(self.top_n), "ss_top")
        return time.perf_counter() - t0

    def _start(self, df: Any, name: str) -> None:
        (df.writeStream.outputMode("complete").format("memory").queryName(name)
         .option("checkpointLocation", str(self.chk / name))
         .trigger(availableNow=True).start().awaitTermination())

    def results(self) -> dict[str, list[tuple]]:
        sp = self.spark
        q1 = sp.sql("SELECT * FROM ss_q1 ORDER BY l_returnflag, l_linestatus").collect()
        q5 = sp.sql("SELECT c_nationkey, o_orderdate, revenue FROM ss_q5").collect()
        top = sp.sql("SELECT o_custkey, revenue FROM ss_top "
                     "ORDER BY revenue DESC, o_custkey").collect()
        return {"q1": [tuple(r) for r in q1], "q5": [tuple(r) for r in q5],
                "top": [tuple(r) for r in top]}


def _norm(row: tuple) -> tuple:
    """Numbers as exact decimals, whatever their scale (Spark's decimal(25,2) sum and
    DuckDB's decimal(38,2) print alike only by luck)."""
    return tuple(Decimal(str(v)).normalize() if isinstance(v, (Decimal, int, float))
                 else str(v) for v in row)


def equal_to_duckdb(results: dict[str, list[tuple]], data_root: Path, generated: Path,
                    until: str, top_n: int) -> bool:
    """The streaming results against DuckDB over the orders before ``until`` (none
    deleted)."""
    import pyarrow.parquet as pq

    from bench.harness import tpch_oracle as oracle

    nation = pq.read_table(data_root / "dim" / "nation.parquet").to_pydict()
    names = dict(zip(nation["n_nationkey"], nation["n_name"], strict=True))
    want_q1 = [_norm(w) for w in oracle.q1(generated, until, [])]
    got_q1 = [_norm(g) for g in results["q1"]]
    want_q5 = sorted(_norm((n, d, v)) for _, n, d, v in oracle.q5(generated, until, []))
    got_q5 = sorted(_norm((names[k], d, v)) for k, d, v in results["q5"] if v)
    want_top = [_norm((k, v)) for k, _, v in oracle.top_customers(generated, until, [], top_n)]
    got_top = [_norm(g) for g in results["top"]]
    return got_q1 == want_q1 and got_q5 == want_q5 and got_top == want_top


def compare(spark: Any, data_root: Path, work: Path, generated: Path,
            ours: list[dict[str, Any]], top_n: int, q1_max: str, days: int = 5
            ) -> dict[str, Any]:
    """Structured Streaming over the history then the first ``days`` daily files without
    deletions among ``ours`` (the pipeline's daily epochs, in order): its seconds per day
    against ours on the same days."""
    ctl = StreamingControl(spark, data_root, work, top_n, q1_max)
    n = ctl.stage_history()
    initial = ctl.run()
    compared: list[Any] = []
    theirs: list[Any] = []
    for d in ours:
        if len(compared) == days:
            break
        if (data_root / "raw" / "deletes" / f"{d['day']}.parquet").exists():
            break  # a deletion day: the append-only stream cannot take it; stop here
        ctl.stage_day(d["day"])
        theirs.append(ctl.run())
        compared.append(d)
    last = compared[-1]["day"]
    until = (date.fromisoformat(last) + timedelta(days=1)).isoformat()
    equal = equal_to_duckdb(ctl.results(), data_root, generated, until, top_n)
    ours_s = statistics.median(d["seconds"] for d in compared)
    theirs_s = statistics.median(theirs)
    return {"ss_history_files": n, "ss_initial_seconds": round(initial, 1),
            "ss_days": [d["day"] for d in compared],
            "ss_daily_seconds": [round(s, 2) for s in theirs],
            "ours_daily_seconds_same_days": [d["seconds"] for d in compared],
            "tpch_structured_streaming_daily_seconds": round(theirs_s, 2),
            "tpch_vs_structured_streaming_daily_ratio": round(ours_s / theirs_s, 2),
            "ss_checkpoint_bytes": sum(p.stat().st_size for p in ctl.chk.rglob("*")
                                       if p.is_file()),
            "ss_results_equal_duckdb": equal}
