"""The process the fault suite (bench/faults.py) kills, freezes or lets crash.

It runs one epoch of the flights pipeline, or one completion, exactly as the embedded
runner does, with one fault armed at a named point. The point is reached by wrapping library
functions in this process only; the job and library code are the production code.

    python bench/fault_child.py epoch --storage URI --data URI --run-id R --until DAY
        [--attempt N] [--fault TASK:POINT:ACTION] [--remote sc://HOST:PORT]
    python bench/fault_child.py complete --storage URI --epoch N --fault POINT:ACTION

Points of a task: ``before_write`` (restored, nothing written), ``mid_write`` (Spark's
files written, the snapshot not yet recorded), ``after_snapshot`` (snapshot stored, not
acknowledged), ``after_ack``; of the coordinator: ``before_decision`` (every task acked,
``_metadata`` not written), ``after_decision`` (``_metadata`` written, not published);
``before_commit`` (every task acked, the commit step not started). Actions: ``kill``
(SIGKILL, nothing runs after it) or ``stop`` (SIGSTOP: a zombie, resumed by the suite).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkpointing import CheckpointConfig, Coordinator, SnapshotWriter, open_storage  # noqa: E402
from checkpointing.coordination.epoch_store import EpochStore  # noqa: E402
from checkpointing.coordination.lease import RunnerLease  # noqa: E402
from checkpointing.errors import CheckpointError  # noqa: E402
from spark_jobs import runtime  # noqa: E402
from spark_jobs.flights.pipeline import EDGES, JOBS, PLAN  # noqa: E402

CONFIG = CheckpointConfig(timeout_seconds=600, retained_epochs=2, lease_seconds=5)


def fire(action: str) -> None:
    """Kill or freeze this process now."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL if action == "kill" else signal.SIGSTOP)


def arm_task_fault(task: str, point: str, action: str) -> None:
    """Wrap the library so that ``task`` reaches ``point`` and then ``action`` fires."""
    if point == "before_write":
        job = JOBS[task]

        def before(run):  # noqa: ANN001, ANN202
            fire(action)
            return job(run)
        JOBS[task] = before
    elif point == "mid_write":
        # The first file the snapshot records: Spark has written the attempt's files,
        # the snapshot has not stored or recorded them yet.
        for name in ("add_directory", "add_stored", "stage_output", "stage_stored_output"):
            _wrap_before(SnapshotWriter, name, lambda self, *a, **k: self.task_id == task,
                         action)
    elif point in ("after_snapshot", "after_ack"):
        real = Coordinator.acknowledge

        def acknowledge(self, epoch_id, task_id, attempt, handle,  # noqa: ANN001, ANN202
                        *, complete=False):  # noqa: ANN001
            if task_id == task and point == "after_snapshot":
                fire(action)
            ack = real(self, epoch_id, task_id, attempt, handle)
            # After the acknowledgement is stored and before the epoch completes on it.
            if task_id == task and point == "after_ack":
                fire(action)
            if complete:
                ack = dataclasses.replace(ack, completed=self._complete_if_last(epoch_id,
                                                                                task_id))
            return ack
        Coordinator.acknowledge = acknowledge
    else:
        raise SystemExit(f"unknown task fault point {point!r}")


def _wrap_before(cls, name: str, when, action: str) -> None:  # noqa: ANN001
    real = getattr(cls, name)

    def wrapped(self, *a, **k):  # noqa: ANN001, ANN202
        if when(self, *a, **k):
            fire(action)
        return real(self, *a, **k)
    setattr(cls, name, wrapped)


def arm_coordinator_fault(point: str, action: str) -> None:
    real = EpochStore.write_decision

    def write_decision(self, meta):  # noqa: ANN001, ANN202
        if point == "before_decision" and meta.completed:
            fire(action)
        result = real(self, meta)
        if point == "after_decision" and meta.completed:
            fire(action)
        return result
    EpochStore.write_decision = write_decision


def run_epoch_cmd(a: argparse.Namespace) -> int:
    coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), "flights_daily",
                        config=CONFIG)
    point = action = None
    if a.fault:
        task, point, action = a.fault.split(":")
        if point != "before_commit":
            arm_task_fault(task, point, action)
    spark = runtime.spark_session("fault-child", s3=a.storage.startswith("s3"),
                                  endpoint_url=a.endpoint_url, remote=a.remote)
    open_epoch = coord.open_epoch_for_run(a.run_id)
    start = (date.fromisoformat(a.until) - timedelta(days=1)).isoformat()
    epoch = open_epoch.epoch_id if open_epoch else coord.begin_epoch(
        PLAN, a.run_id, data_interval={"start": start, "end": a.until}).epoch_id
    with RunnerLease(coord, epoch):  # as the embedded runner drives an epoch
        for task in EDGES:
            runtime.run_task(JOBS[task], coord, epoch, task, a.attempt, spark, a.data,
                             endpoint_url=a.endpoint_url)
    if point == "before_commit":
        fire(action)
    meta = coord.complete(epoch)
    print(json.dumps({"epoch_id": epoch, "status": meta.status}))
    return 0


def complete_cmd(a: argparse.Namespace) -> int:
    coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), "flights_daily",
                        config=CONFIG)
    point, action = a.fault.split(":")
    arm_coordinator_fault(point, action)
    meta = coord.complete(a.epoch)
    print(json.dumps({"epoch_id": a.epoch, "status": meta.status}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fault_child")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("epoch")
    e.add_argument("--storage", required=True)
    e.add_argument("--data", required=True)
    e.add_argument("--run-id", required=True)
    e.add_argument("--until", required=True, help="the data interval's end (ISO day)")
    e.add_argument("--attempt", type=int, default=1)
    e.add_argument("--fault", help="TASK:POINT:ACTION")
    e.add_argument("--endpoint-url")
    e.add_argument("--remote", help="a Spark Connect server (sc://host:port) instead of a "
                   "local Spark in this process")
    c = sub.add_parser("complete")
    c.add_argument("--storage", required=True)
    c.add_argument("--epoch", type=int, required=True)
    c.add_argument("--fault", required=True, help="POINT:ACTION")
    c.add_argument("--endpoint-url")
    a = ap.parse_args(argv)
    try:
        return run_epoch_cmd(a) if a.cmd == "epoch" else complete_cmd(a)
    except CheckpointError as exc:
        print(f"fault_child: refused: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
