"""Where a tpch_daily deletion day's time goes, against a normal day, on one kept state.

The history epoch of ``--scale`` runs once into ``--work`` (kept: a later run with the same
``--work`` reuses it). Then, ``--rounds`` times, one more day's epoch (the first day after
the history) of each kind and each way, alternating (every other round in reverse order):

- kind: a **normal** day (the day's orders and line items), or a **deletion** day (the same
  plus a deletion file of ``--deletes`` history orders, drawn afresh for every try);
- way: the ingest's writes **at once** (``JobRun.concurrently``, as the job does), or **one
  after the other** (the control).

Each try runs the four tasks in turn and is aborted after the last, so that every try
starts from the same parent epoch; the first round is left out of the medians (the
server's first run of each path). Prints and writes (``--out``) each try's seconds per
task and the medians per kind and way.

    python bench/tpch_deletion_day.py --scale 10 --rounds 7 --work /tmp/tpch-sf10-state
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness.local import local_root  # noqa: E402
from checkpointing import Coordinator, open_storage  # noqa: E402
from checkpointing.protocol.epoch_metadata import AbortReason  # noqa: E402
from spark_jobs.runtime import run_task  # noqa: E402
from spark_jobs.runtime.job_run import JobRun  # noqa: E402
from spark_jobs.tpch.landing import DEFAULT_CACHE, LAST_ORDER_DAY, generate, land  # noqa: E402
from spark_jobs.tpch.pipeline import JOBS, PLAN, run_epoch  # noqa: E402

WAYS = {"at_once": JobRun.concurrently,
        "one_after_the_other": lambda self, *actions: [a() for a in actions]}


def _interval(end: Any) -> dict[str, str]:
    return {"start": (end - timedelta(days=1)).isoformat(), "end": end.isoformat()}


def _progress(msg: str) -> None:
    print(f"tpch deletion day: {msg}", file=sys.stderr, flush=True)


def medians(tries: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per kind and way, the median seconds of the epoch and of each task, the first round
    left out (all rounds when there is only one)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    last = max(t["round"] for t in tries)
    for t in tries:
        if t["round"] == 0 and last > 0:
            continue
        out.setdefault(t["kind"], {}).setdefault(t["way"], {})
    for kind, ways in out.items():
        for way in ways:
            rs = [t for t in tries if t["kind"] == kind and t["way"] == way
                  and (t["round"] > 0 or last == 0)]
            ways[way] = {k: round(statistics.median(t["seconds"][k] for t in rs), 2)
                         for k in rs[0]["seconds"]}
    return out


def main(argv: list[str] | None = None) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from spark_jobs.runtime.connect_server import ConnectServer
    from spark_jobs.runtime.processes import free_port

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--deletes", type=int, default=100, help="orders a deletion day deletes")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--work", type=Path, required=True,
                    help="where the history's state is kept (reused when it holds one)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/tpch_deletion_day.json")
    a = ap.parse_args(argv)

    until = LAST_ORDER_DAY - timedelta(days=13)  # tpch_bench.py's full history at --days 10
    day_after = until + timedelta(days=1)
    a.work.mkdir(parents=True, exist_ok=True)
    data_uri, ckpt_uri = (a.work / "data").as_uri(), (a.work / "ckpt").as_uri()
    generated = generate(a.scale, a.cache)
    server = ConnectServer(port=free_port(), driver_memory=a.driver_memory,
                           log_path=a.work / "connect.log").start()
    spark = None
    tries: list[dict[str, Any]] = []
    try:
        spark = server.session("tpch-deletion-day")
        c = Coordinator(open_storage(ckpt_uri), "tpch_deletion_day")
        if c.latest_completed() is None:
            land(open_storage(data_uri), a.scale, until, 1, cache=a.cache)
            t0 = time.perf_counter()
            run_epoch(c, spark, data_uri, "history", data_interval=_interval(until))
            _progress(f"history epoch in {time.perf_counter() - t0:.0f} s")
        orders = pq.read_table(generated / "orders.parquet",
                               columns=["o_orderkey", "o_orderdate"])
        pool = orders.filter(pc.less(orders["o_orderdate"], pa.scalar(until, pa.date32())))
        keys = pool["o_orderkey"].to_pylist()
        deletes = local_root(open_storage(data_uri)) / "raw" / "deletes" / f"{until}.parquet"
        deletes.parent.mkdir(parents=True, exist_ok=True)
        rnd = random.Random()  # noqa: S311 - which orders, not secrets
        for r in range(a.rounds):
            kinds = ["normal", "deletion"] if r % 2 == 0 else ["deletion", "normal"]
            ways = list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]
            for kind in kinds:
                for way in ways:
                    if kind == "deletion":
                        picks = pa.array(rnd.sample(keys, a.deletes), pa.int64())
                        pq.write_table(pool.filter(pc.is_in(pool["o_orderkey"], picks)),
                                       deletes, compression="zstd")
                    else:
                        deletes.unlink(missing_ok=True)
                    JobRun.concurrently = WAYS[way]
                    b = c.begin_epoch(PLAN, f"try-{len(tries) + 1}",
                                      data_interval=_interval(day_after))
                    secs: dict[str, float] = {}
                    t00 = time.perf_counter()
                    for task, job in JOBS.items():
                        t0 = time.perf_counter()
                        run_task(job, c, b.epoch_id, task, 1, spark, data_uri, complete=False)
                        secs[task] = round(time.perf_counter() - t0, 2)
                    secs["epoch"] = round(time.perf_counter() - t00, 2)
                    deleted = c.acknowledged_handle(b.epoch_id, "ingest") \
                        .row_counts.get("orders_deleted", 0)
                    c.abort(b.epoch_id, AbortReason.CANCELLED, "a timing try")
                    tries.append({"round": r, "kind": kind, "way": way,
                                  "orders_deleted": deleted, "seconds": secs})
                    _progress(json.dumps(tries[-1]))
    finally:
        JobRun.concurrently = WAYS["at_once"]
        if spark is not None:
            spark.stop()
        server.stop()
    result = {"scale": a.scale, "rounds": a.rounds, "deletes": a.deletes,
              "medians": medians(tries), "tries": tries}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["medians"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
