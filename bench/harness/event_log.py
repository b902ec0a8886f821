"""Where a task's Spark time goes, from a Spark event log (``spark.eventLog.enabled``).

Every job an attempt runs carries its tag (``spark_jobs.runtime.job_run.job_tag``:
``ckpt.<pipeline>.<task>.e<epoch>.a<attempt>``), which Spark Connect keeps among the job's
tags. Per task and epoch this sums:

- ``jobs`` and ``jobs_ms``: how many Spark jobs ran, and the wall time during which at
  least one of them was running (the union of their intervals);
- ``executor_ms``: the tasks' executor run time (both cores count);
- ``by_kind``: per kind of SQL execution (the physical plan's root: a Parquet write, a
  local checkpoint, a collect...), how many ran and the wall time of their jobs.

The time of a refresh outside ``jobs_ms`` is the driver's and the client's: planning,
analysis, the requests between jobs.

    python -m bench.harness.event_log <event log file or directory> [--epoch N]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TAG = re.compile(r"ckpt\.[A-Za-z0-9_-]+\.([A-Za-z0-9_-]+)\.e(\d+)\.a\d+")
_PLAN_ID = re.compile(r"\s*\(\d+\)|#\d+|\[[^\]]*\]|\s+\d+$")


@dataclass
class TaskTime:
    """One task's Spark time in one epoch."""

    jobs: int = 0
    intervals: list[tuple[int, int]] = field(default_factory=list)
    executor_ms: int = 0
    input_bytes: int = 0
    #: each job: (kind, submitted, ms, executor ms, input bytes)
    each: list[list[Any]] = field(default_factory=list)
    by_kind: dict[str, list[float]] = field(default_factory=lambda: defaultdict(
        lambda: [0, 0.0]))

    @property
    def jobs_ms(self) -> int:
        """The wall time during which at least one of the task's jobs was running."""
        total, end = 0, -1
        for a, b in sorted(self.intervals):
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        return total

    def as_json(self) -> dict[str, Any]:
        kinds = sorted(self.by_kind.items(), key=lambda kv: -kv[1][1])
        return {"jobs": self.jobs, "jobs_ms": self.jobs_ms, "executor_ms": self.executor_ms,
                "input_bytes": self.input_bytes,
                "by_kind": {k: {"jobs": int(n), "ms": round(ms)} for k, (n, ms) in kinds}}


def _kind(plan: str) -> str:
    """The root of a physical plan, without its ids: what the execution was."""
    lines = [ln.strip() for ln in plan.splitlines() if ln.strip()]
    if lines and lines[0].startswith("=="):
        lines = lines[1:]
    if not lines:
        return "(no plan)"
    root = lines[0].lstrip("+-*:() 0123456789")
    if root.startswith("AdaptiveSparkPlan") and len(lines) > 1:
        root = lines[1].lstrip("+-*:() 0123456789")
    words = root.split(" ")
    # "Execute InsertIntoHadoopFsRelationCommand ...": the command is the kind
    name = " ".join(words[:2]) if words[0] == "Execute" and len(words) > 1 else words[0]
    return _PLAN_ID.sub("", name)[:48]


def _files(path: Path) -> list[Path]:
    """The event files at ``path``: a file, or a rolling log's directory (``events_*``)."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))


def _lines(f: Path) -> list[str]:
    """The JSON lines of one event file, Spark's default zstd compression read by Arrow's
    codec (the last frame of a log still being written may be cut: what precedes it
    counts)."""
    if f.suffix != ".zstd":
        return f.read_text().splitlines()
    import pyarrow as pa

    data = bytearray()
    try:
        with pa.CompressedInputStream(pa.OSFile(str(f)), "zstd") as stream:
            while chunk := stream.read(1 << 20):
                data += chunk
    except OSError:
        pass
    lines = bytes(data).decode("utf-8", "replace").splitlines()
    return lines if data.endswith(b"\n") else lines[:-1]


def summarise(path: Path) -> dict[tuple[str, int], TaskTime]:
    """Per (task, epoch), its Spark jobs' time in the event log(s) at ``path``."""
    kinds: dict[str, str] = {}
    started: dict[int, tuple[tuple[str, int], int, str, list[Any]]] = {}
    stage_of: dict[int, tuple[str, int]] = {}
    job_of: dict[int, list[Any]] = {}
    out: dict[tuple[str, int], TaskTime] = defaultdict(TaskTime)
    for f in _files(path):
        for line in _lines(f):
            if not line.strip():
                continue
            e = json.loads(line)
            ev = e.get("Event", "")
            if ev.endswith("SparkListenerSQLExecutionStart"):
                kinds[str(e["executionId"])] = _kind(e.get("physicalPlanDescription", ""))
            elif ev == "SparkListenerJobStart":
                props = e.get("Properties") or {}
                m = _TAG.search(props.get("spark.job.tags", "") or "")
                if m is None:
                    continue
                key = (m.group(1), int(m.group(2)))
                kind = kinds.get(str(props.get("spark.sql.execution.id")), "(no SQL)")
                row = [kind, e["Submission Time"], 0, 0, 0]
                out[key].each.append(row)
                started[e["Job ID"]] = (key, e["Submission Time"], kind, row)
                for s in e.get("Stage IDs", []):
                    stage_of[s] = key
                    job_of[s] = row
            elif ev == "SparkListenerJobEnd" and e["Job ID"] in started:
                key, t0, kind, row = started.pop(e["Job ID"])
                t = out[key]
                t.jobs += 1
                t.intervals.append((t0, e["Completion Time"]))
                t.by_kind[kind][0] += 1
                t.by_kind[kind][1] += e["Completion Time"] - t0
                row[2] = e["Completion Time"] - t0
            elif ev == "SparkListenerTaskEnd" and e.get("Stage ID") in stage_of:
                metrics = e.get("Task Metrics") or {}
                ran = int(metrics.get("Executor Run Time", 0))
                read = int((metrics.get("Input Metrics") or {}).get("Bytes Read", 0))
                out[stage_of[e["Stage ID"]]].executor_ms += ran
                out[stage_of[e["Stage ID"]]].input_bytes += read
                job_of[e["Stage ID"]][3] += ran
                job_of[e["Stage ID"]][4] += read
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--epoch", type=int, default=None)
    ap.add_argument("--jobs", action="store_true", help="also every job, in order")
    a = ap.parse_args(argv)
    found = summarise(a.path)
    print(json.dumps({f"{task}.e{epoch}": {**t.as_json(), **({"each": [
        {"kind": k, "ms": ms, "executor_ms": ex, "input_bytes": b}
        for k, _, ms, ex, b in t.each]} if a.jobs else {})}
                      for (task, epoch), t in sorted(found.items())
                      if a.epoch is None or epoch == a.epoch}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
