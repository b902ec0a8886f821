"""Coordinator benchmark (not a test): prints JSON.

- per epoch, for 10 and 1,000 tasks, against the S3-compatible server started on
  127.0.0.1 (MinIO, else moto): coordinator wall time (begin + complete) and storage
  requests, split into the coordinator's own requests and each task's register + ack path;
- the latest-completed lookup's request count after 100 and after 10,000 epochs;
- the storage requests of one Epochs-page refresh with a year of daily epochs (365), as
  its three REST routes read storage: the first listing ever (no epoch summaries yet:
  protocol 1.4's cost on every refresh), a fresh api-server, and a refresh.

Usage: python bench/coordinator_bench.py [--quick] [--history N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness.s3server import ACCESS_KEY, SECRET_KEY, start_s3_server  # noqa: E402
from checkpointing import Coordinator, LocalStorage, StateHandle  # noqa: E402
from checkpointing.protocol.barrier import TaskPlan  # noqa: E402
from checkpointing.storage.s3 import S3Storage  # noqa: E402


def epoch_cost(storage, n_tasks: int, repeats: int) -> dict:
    plan = {f"t{i:04d}": TaskPlan() for i in range(n_tasks)}
    c = Coordinator(storage, f"bench{n_tasks}-{uuid.uuid4().hex[:6]}")
    coord_s, coord_req, task_req = [], [], []
    for r in range(repeats):
        storage.stats.reset()
        t0 = time.perf_counter()
        b = c.begin_epoch(plan, f"run{r}")
        t_begin = time.perf_counter() - t0
        begin_req = storage.stats.total
        storage.stats.reset()
        for task in plan:  # what every task process does
            c.register_attempt(b.epoch_id, task, 1)
            c.acknowledge(b.epoch_id, task, 1, StateHandle(task, b.epoch_id, 1))
        task_req.append(storage.stats.total / n_tasks)
        storage.stats.reset()
        t0 = time.perf_counter()
        meta = c.complete(b.epoch_id)
        t_complete = time.perf_counter() - t0
        assert meta.completed
        coord_req.append(begin_req + storage.stats.total)
        coord_s.append(t_begin + t_complete)
    coord = statistics.median(coord_req)
    per_task = statistics.median(task_req)
    return {
        "tasks": n_tasks,
        "coordinator_seconds_per_epoch": round(statistics.median(coord_s), 4),
        "coordinator_requests_per_epoch": coord,
        "task_requests_per_task": per_task,
        "storage_requests_per_task": round(per_task + coord / n_tasks, 3),
        "repeats": repeats,
    }


def lookup_cost(history: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        storage = LocalStorage(d)
        c = Coordinator(storage, "history")
        plan = {"t": TaskPlan()}
        t0 = time.perf_counter()
        checkpoints = {}
        for i in range(1, history + 1):
            b = c.begin_epoch(plan, f"r{i}")
            c.acknowledge(b.epoch_id, "t", 1, StateHandle("t", b.epoch_id, 1))
            c.complete(b.epoch_id)
            if i in (100, history):
                fresh = Coordinator(storage, "history")  # no caches
                storage.stats.reset()
                latest = fresh.latest_completed()
                assert latest == i
                checkpoints[i] = storage.stats.total
        return {"epochs": history, "build_seconds": round(time.perf_counter() - t0, 1),
                "latest_lookup_requests_at_100": checkpoints.get(100),
                f"latest_lookup_requests_at_{history}": checkpoints[history]}


def page_refresh_requests(c: Coordinator, cache) -> int:  # noqa: ANN001
    """Storage requests of one refresh of the Epochs page: what its three routes read
    (plugins/dag_checkpoints/server/api.py: epochs, savepoints, lineages), one page of 50 rows."""
    from checkpointing.views.listing import list_epochs

    c.storage.stats.reset()
    list_epochs(c, limit=50, per_task=True, cache=cache, count=True)  # GET .../epochs
    c.latest_completed()
    c.records.last_completed_age()
    c.catalog.savepoints()  # GET .../savepoints
    c.catalog.manifest()  # GET .../lineages
    for o in c.catalog.origins():
        c.catalog.promotion(o.lineage)
    c.latest_completed()
    return c.storage.stats.total


def page_refresh_cost(epochs: int = 365) -> dict:
    """A year of daily epochs of a six-task plan (each task acknowledged with a file), on
    local storage (requests are counted, not timed)."""
    from checkpointing import SnapshotWriter, plan_from_edges
    from checkpointing.views.summary import SummaryCache

    plan = plan_from_edges({"a": [], "b": [], "c": ["a", "b"], "d": ["a"], "e": ["a"],
                            "f": ["a", "c", "d", "e"]}, {"c", "d", "e"})
    with tempfile.TemporaryDirectory() as d:
        storage = LocalStorage(Path(d) / "ckpt")
        c = Coordinator(storage, "daily")
        (Path(d) / "part").write_bytes(b"x" * 64)
        t0 = time.perf_counter()
        for i in range(1, epochs + 1):
            b = c.begin_epoch(plan, f"scheduled__{i}")
            for task in plan:
                c.register_attempt(b.epoch_id, task, 1)
                w = SnapshotWriter(storage, c.layout, b.epoch_id, task, 1, shared=False)
                w.add_file("part-0", Path(d) / "part")
                c.acknowledge(b.epoch_id, task, 1, w.handle())
            c.complete(b.epoch_id)
        build = time.perf_counter() - t0
        # The first listing ever reads every row's documents (1.4's cost on every refresh)
        # and writes the summaries; a fresh server reads those; a refresh reads listings.
        without = page_refresh_requests(c, SummaryCache())
        cache = SummaryCache()
        cold = page_refresh_requests(c, cache)
        warm = page_refresh_requests(c, cache)
        return {"epochs": epochs, "tasks": len(plan), "rows_per_page": 50,
                "build_seconds": round(build, 1), "requests_cold": cold,
                "requests_warm": warm, "requests_cold_without_summaries": without}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats, 1,000-epoch history")
    ap.add_argument("--history", type=int, default=None)
    args = ap.parse_args()
    repeats = 2 if args.quick else 5
    history = args.history or (1000 if args.quick else 10_000)

    server = start_s3_server()
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    try:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        server.client().create_bucket(Bucket=bucket)
        s3 = S3Storage(bucket, "bench", endpoint_url=server.endpoint)
        results = {
            "s3_server": server.kind,
            "epoch_10_tasks": epoch_cost(s3, 10, repeats),
            "epoch_1000_tasks": epoch_cost(s3, 1000, max(1, repeats // 2)),
        }
    finally:
        server.stop()
    results["latest_lookup"] = lookup_cost(history)
    results["epochs_page_refresh"] = page_refresh_cost(365)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
