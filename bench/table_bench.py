"""Table outputs on MinIO (PROTOCOL 6.12): what a table commit costs per output, and what a
consumer pays to read the published output through the table instead of the manifest.

For ``--epochs`` epochs (default 20) of a two-task plan whose ``gold`` task stages one
output of ``--rows`` rows as a Delta table (``overwrite``: a running aggregate republished
in full, the common gold-table case), the publish step's table commit is timed and its S3
requests counted from MinIO's own request counters (delta-rs's requests are not this
library's, so they are counted where they land). Then a consumer reads the published
output ``--reads`` times each way: the manifest and its files (pyarrow over our storage),
and the table (delta-rs). Medians. Writes ``table_*`` keys into bench/results/latest.json.

    python bench/table_bench.py [--epochs 20] [--rows 20000] [--reads 7]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MINIO_PROMETHEUS_AUTH_TYPE", "public")  # request counters, no token

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import checkpointing.coordination.epoch_finisher as finisher_module  # noqa: E402
from bench.harness.s3server import ACCESS_KEY, SECRET_KEY, start_s3_server  # noqa: E402
from checkpointing import Coordinator, SnapshotWriter, TableSpec  # noqa: E402
from checkpointing.protocol.barrier import TaskPlan  # noqa: E402
from checkpointing.records.two_phase_publish import read_manifest  # noqa: E402
from checkpointing.storage.s3 import S3Storage  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PLAN = {"src": TaskPlan(), "gold": TaskPlan(("src",), True)}
_COUNTER = re.compile(
    r'^minio_api_requests_total\{[^}]*name="([^"]+)"[^}]*type="s3"[^}]*\} ([0-9.e+]+)$')


def s3_requests(endpoint: str) -> dict[str, float]:
    """MinIO's cumulative S3 request counters by API (its metrics v3 endpoint)."""
    with urllib.request.urlopen(f"{endpoint}/minio/metrics/v3/api/requests", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _COUNTER.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {k: int(after.get(k, 0) - before.get(k, 0)) for k in sorted(set(after) | set(before))
            if after.get(k, 0) - before.get(k, 0) > 0}


def run(epochs: int, rows: int, reads: int) -> dict[str, Any]:
    server = start_s3_server("minio")
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = ACCESS_KEY, SECRET_KEY
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    server.client().create_bucket(Bucket=bucket)
    storage = S3Storage(bucket, "ckpt", endpoint_url=server.endpoint)
    c = Coordinator(storage, "bench")
    spec = TableSpec(f"s3://{bucket}/warehouse/totals", "overwrite")
    commits: list[dict[str, Any]] = []
    original = finisher_module.commit_tables  # type: ignore[attr-defined]

    def timed_commit(*args: Any, **kwargs: Any) -> Any:
        before = s3_requests(server.endpoint)
        t0 = time.perf_counter()
        out = original(*args, **kwargs)
        ms = (time.perf_counter() - t0) * 1000
        requests = _delta(before, s3_requests(server.endpoint))
        commits.append({"ms": round(ms, 1), "requests": requests})
        return out

    finisher_module.commit_tables = timed_commit  # type: ignore[attr-defined]
    try:
        with tempfile.TemporaryDirectory(prefix="table-bench-") as tmp:
            for n in range(1, epochs + 1):
                b = c.begin_epoch(PLAN, f"r{n}")
                for task in PLAN:
                    c.register_attempt(b.epoch_id, task, 1)
                c.acknowledge(b.epoch_id, "src", 1, SnapshotWriter(
                    storage, c.layout, b.epoch_id, "src", 1).handle())
                path = Path(tmp) / f"e{n}.parquet"
                pq.write_table(pa.table({"key": [f"k{i}" for i in range(rows)],
                                         "total": [i * n for i in range(rows)]}), path)
                w = SnapshotWriter(storage, c.layout, b.epoch_id, "gold", 1)
                w.stage_table_output("totals", spec, [path], rows=rows)
                c.acknowledge(b.epoch_id, "gold", 1, w.handle())
                c.complete(b.epoch_id)
        read = _read_times(storage, c, spec, server.endpoint, reads)
    finally:
        finisher_module.commit_tables = original  # type: ignore[attr-defined]
        server.stop()
    measured = commits[1:]  # the first commit also creates the table (version 0)
    per_commit = [sum(x["requests"].values()) for x in measured]
    return {
        "table_commit_ms_per_output": statistics.median(x["ms"] for x in measured),
        "table_commit_requests_per_output": statistics.median(per_commit),
        "table_read_vs_manifest_read_ratio": round(read["table_s"] / read["manifest_s"], 3),
        "details": {"commits": commits, "first_commit_creates_table": commits[0],
                    "read": read, "epochs": epochs, "rows": rows},
    }


def _read_times(storage: S3Storage, c: Coordinator, spec: TableSpec, endpoint: str,
                reads: int) -> dict[str, Any]:
    """Median seconds of a consumer reading the published output, both ways (one warm-up
    each), and that both give the same rows."""
    from deltalake import DeltaTable

    from checkpointing.tables.delta import storage_options, table_path

    def by_manifest() -> pa.Table:
        m = read_manifest(storage, c.layout)
        parts = []
        for ref in m.outputs["totals"].files:
            key = ref.uri.split(f"s3://{storage.bucket}/", 1)[1]
            body = storage.client.get_object(Bucket=storage.bucket, Key=key)["Body"].read()
            parts.append(pq.read_table(io.BytesIO(body)))
        return pa.concat_tables(parts)

    def by_table() -> pa.Table:
        return DeltaTable(table_path(spec.location),
                          storage_options=storage_options(spec.location, endpoint)
                          ).to_pyarrow_table()

    times: dict[str, list[float]] = {"manifest": [], "table": []}
    results = {}
    for name, fn in (("manifest", by_manifest), ("table", by_table)):
        results[name] = fn().sort_by("key")  # warm-up
        for _ in range(reads):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    assert results["manifest"].equals(results["table"].select(results["manifest"].column_names))
    return {"manifest_s": statistics.median(times["manifest"]),
            "table_s": statistics.median(times["table"]), "all": times}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="table_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--reads", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    a = ap.parse_args(argv)
    from bench.pipeline_bench import record

    result = run(a.epochs, a.rows, a.reads)
    details = result.pop("details")
    record(a.out, a.history, "tables", result, details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
