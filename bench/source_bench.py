"""What a source task's input discovery costs after 30 and after 360 days of history, with
one correction of a file consumed long ago: the runtime's ``new_input`` with the
index of seen files, as ``JobRun.new_input`` runs it, on local storage with every storage
call counted.

For each history length, a daily file is landed per day (modification times a day apart)
and consumed by one epoch each, the index kept as a task's state keeps it (one document per
month); then the first day's file is rewritten and one more epoch consumes it. The last
epoch's wall time (median of repeats), storage calls by kind and index documents read and
written are reported. Writes ``source_*`` keys into bench/results/latest.json.

    python bench/source_bench.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pipeline_bench import record  # noqa: E402
from checkpointing import LocalStorage  # noqa: E402
from spark_jobs.runtime.file_source import SeenIndex, new_input  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DAY_S = 86400.0


class CountingStorage(LocalStorage):
    """Local storage that counts the calls a listing-and-read workload makes."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.calls: Counter[str] = Counter()

    def list(self, prefix: str, start_after: str | None = None):
        self.calls["list"] += 1
        return super().list(prefix, start_after)

    def head(self, key: str):
        self.calls["head"] += 1
        return super().head(key)

    def read(self, key: str):
        self.calls["read"] += 1
        return super().read(key)


def _land(st: LocalStorage, day: str, mtime: float, body: bytes) -> None:
    key = f"raw/readings/{day}.csv"
    st.write(key, body)
    os.utime(st.root / key, (mtime, mtime))


def measure(days: int, repeats: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        st = CountingStorage(Path(tmp))
        t0 = 1_700_000_000.0
        stored: dict[str, bytes] = {}
        offsets = None
        for i in range(days):
            day = (date(2024, 1, 1) + timedelta(days=i)).isoformat()
            _land(st, day, t0 + i * DAY_S, b"meter,kwh\nm1,1.0\n")
            index = SeenIndex(lambda b: SeenIndex.parse(stored[b]) if b in stored else None)
            offsets = new_input(st, "raw/readings/", offsets, index=index).offsets
            stored.update(index.documents())
        _land(st, "2024-01-01", t0 + days * DAY_S, b"meter,kwh\nm1,2.0\n")  # the correction
        seconds: list[float] = []
        loads, written, calls = 0, 0, Counter[str]()
        for _ in range(repeats):  # the same epoch again: nothing it does is kept
            st.calls.clear()
            read: list[str] = []

            def load(bucket: str, read=read):
                read.append(bucket)
                return SeenIndex.parse(stored[bucket]) if bucket in stored else None

            index = SeenIndex(load)
            t = time.perf_counter()
            found = new_input(st, "raw/readings/", offsets, index=index)
            index.documents()
            seconds.append(time.perf_counter() - t)
            assert found.replaced == ["raw/readings/2024-01-01.csv"], found
            loads, written, calls = len(read), len(index.changed), Counter(st.calls)
        return {"seconds": statistics.median(seconds), "index_documents_read": loads,
                "index_documents_written": written, "storage_calls": sum(calls.values()),
                "list_calls": calls["list"], "read_calls": calls["read"],
                "head_calls": calls["head"], "index_documents": len(stored)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="source_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    a = ap.parse_args(argv)
    at30, at360 = measure(30, a.repeats), measure(360, a.repeats)
    result = {
        "source_correction_epoch_ms_30_days": round(at30["seconds"] * 1000, 2),
        "source_correction_epoch_ms_360_days": round(at360["seconds"] * 1000, 2),
        "source_index_documents_read_30_days": at30["index_documents_read"],
        "source_index_documents_read_360_days": at360["index_documents_read"],
        "source_storage_calls_30_days": at30["storage_calls"],
        "source_storage_calls_360_days": at360["storage_calls"],
    }
    record(a.out, a.history, "sources", result, {"30": at30, "360": at360})
    return 0


if __name__ == "__main__":
    sys.exit(main())
