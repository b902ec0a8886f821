"""Restore verification of unchanged state: what a begin pays to check the parent epoch's
files against their verification record (PROTOCOL 5.16), on local storage and on MinIO.

The state is TPC-H SF 10's shape after a history epoch: 2,498 files of 400 kB (1.0 GB).
Every file is unchanged since the record, so nothing is hashed; what is measured is the
cheap check of each. In the same run, the control is the check protocol 1.6-1.11 made: the
etag of a HEAD, which on a filesystem is an md5 of the file's bytes, and on S3 one HEAD
after another (no listing, ``parallel_checks = 1``). Medians of ``--repeats``.

    .venv/bin/python bench/verify_bench.py [--files 2498] [--file-kb 400] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from checkpointing import Coordinator  # noqa: E402
from checkpointing.protocol.barrier import TaskPlan  # noqa: E402
from checkpointing.state.incremental import SnapshotWriter  # noqa: E402
from checkpointing.state.verify import verify_handles  # noqa: E402
from checkpointing.storage.base import Storage  # noqa: E402
from checkpointing.storage.local import LocalStorage  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def _etag_stamp(storage: Storage, key: str) -> tuple[int, str]:
    """Protocol 1.6-1.11's check: the etag of a HEAD (an md5 of the bytes on files)."""
    info = storage.head(key)
    return info.size, f"etag:{info.etag}"


def _state(storage: Storage, files: int, size: int, work: Path) -> dict[str, Any]:
    """One completed epoch whose task's state is ``files`` day partitions."""
    c = Coordinator(storage, "verify-bench")
    b = c.begin_epoch({"t": TaskPlan(publishes=True)}, "r1")
    c.register_attempt(b.epoch_id, "t", 1)
    w = SnapshotWriter(storage, c.layout, b.epoch_id, "t", 1)
    d = work / "state"
    for i in range(files):
        p = d / f"day={i:05d}" / "part-0.parquet"
        p.parent.mkdir(parents=True)
        p.write_bytes(os.urandom(size))
    w.add_directory(d)
    c.acknowledge(b.epoch_id, "t", 1, w.handle())
    c.complete(b.epoch_id)
    shutil.rmtree(d)
    return c.completed_handles(b.epoch_id)


def _check(storage: Storage, handles: dict[str, Any], repeats: int) -> float:
    """Median seconds of checking every file against a record made with the same kind of
    stamp; refuses a run in which any file was hashed."""
    known = verify_handles(storage, 1, handles).verified
    seconds = []
    for _ in range(repeats):
        t = time.perf_counter()
        rep = verify_handles(storage, 1, handles, known=known)
        seconds.append(time.perf_counter() - t)
        if rep.files_checked or not rep.ok:
            raise SystemExit(f"verify bench: {rep.files_checked} file(s) hashed: {rep.problems}")
    return statistics.median(seconds)


def measure(storage: Storage, handles: dict[str, Any], repeats: int) -> dict[str, float]:
    cls = type(storage)
    now = _check(storage, handles, repeats)
    saved = cls.stamp, cls.stamps, cls.parallel_checks
    try:
        cls.stamp, cls.stamps, cls.parallel_checks = (
            _etag_stamp, Storage.stamps, 1)  # type: ignore[assignment]
        before = _check(storage, handles, repeats)
    finally:
        cls.stamp, cls.stamps, cls.parallel_checks = saved
    return {"seconds": round(now, 3), "control_seconds": round(before, 3),
            "speedup": round(before / now, 1)}


def main(argv: list[str] | None = None) -> int:
    from bench.pipeline_bench import record

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2498)
    ap.add_argument("--file-kb", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-s3", action="store_true", help="local storage only")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="verify-bench-"))
    results: dict[str, Any] = {}
    try:
        local = LocalStorage(work / "ckpt")
        results["local"] = measure(local, _state(local, a.files, a.file_kb * 1000, work),
                                   a.repeats)
        if not a.no_s3:
            from bench.harness.s3server import start_s3_server

            server = start_s3_server("minio")
            try:
                server.client().create_bucket(Bucket="verify-bench")
                from checkpointing.storage.s3 import S3Storage

                s3 = S3Storage("verify-bench", "run", endpoint_url=server.endpoint,
                               client=server.client())
                results["minio"] = measure(s3, _state(s3, a.files, a.file_kb * 1000, work),
                                           a.repeats)
            finally:
                server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {"restore_check_seconds_local": results["local"]["seconds"],
               "restore_check_speedup_local": results["local"]["speedup"]}
    if "minio" in results:
        summary.update({"restore_check_seconds_minio": results["minio"]["seconds"],
                        "restore_check_speedup_minio": results["minio"]["speedup"]})
    record(a.out, a.history, "verify", summary,
           {"files": a.files, "bytes": a.files * a.file_kb * 1000, "repeats": a.repeats,
            **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
