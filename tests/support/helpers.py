"""Small helpers shared by the tests (no fakes of storage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpointing import Coordinator, SnapshotWriter
from checkpointing.protocol.barrier import TaskPlan

DIAMOND = {"src_a": TaskPlan(), "src_b": TaskPlan(),
           "join": TaskPlan(("src_a", "src_b")), "sink": TaskPlan(("join",), True)}


class FakeClock:
    """A settable clock: the coordinator's deadlines are compared with it."""

    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def ack_task(c: Coordinator, epoch: int, task: str, attempt: int = 1,
             files: dict[str, bytes] | None = None, outputs: dict[str, bytes] | None = None,
             tmp: Path | None = None, previous=None, complete: bool = False):
    """Register, snapshot the given file contents, and acknowledge; the acknowledgement's
    result (:class:`checkpointing.protocol.acknowledgement.AckResult`)."""
    c.register_attempt(epoch, task, attempt)
    w = SnapshotWriter(c.storage, c.layout, epoch, task, attempt, previous=previous)
    for name, data in (files or {}).items():
        p = tmp / f"{task}-{epoch}-{attempt}-{name}"
        p.write_bytes(data)
        w.add_file(name, p)
    for name, data in (outputs or {}).items():
        p = tmp / f"{task}-{epoch}-{attempt}-out-{name}"
        p.write_bytes(data)
        w.stage_output(name, [p], rows=len(data.splitlines()), names=["part-0"])
    return c.acknowledge(epoch, task, attempt, w.handle(offsets={"epoch": epoch}),
                         complete=complete)


def run_epoch(c: Coordinator, plan=DIAMOND, tmp: Path | None = None, run_id: str = "r",
              payload: bytes = b"x", **begin: Any):
    b = c.begin_epoch(plan, run_id, **begin)
    for task, tp in plan.items():
        ack_task(c, b.epoch_id, task, files={"state": payload + task.encode()},
                 outputs={"gold": payload} if tp.publishes else None, tmp=tmp)
    return c.complete(b.epoch_id)


def sigkill_mid_epoch_then_rerun(args: list[str], env: dict[str, str], c: Coordinator,
                                 epoch: int) -> None:
    """Run the embedded runner ``args``, SIGKILL it once a task acknowledged ``epoch`` and
    the epoch is undecided (mid-epoch), then run it again with the same arguments: it must
    resume and complete that epoch."""
    import os
    import signal
    import subprocess
    import time

    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        # Not epoch_ids(): the directory exists a moment before its barrier.
        barrier = c.store.barrier_or_none(epoch)
        if barrier is not None and c.metadata(epoch) is None and \
                c.missing_tasks(epoch) != sorted(barrier.plan):
            break  # a task acknowledged, the epoch is not decided: mid-epoch
        time.sleep(0.1)
    assert p.poll() is None, p.communicate()[1][-2000:]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert c.metadata(epoch) is None and c.missing_tasks(epoch)
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f'"epoch_id": {epoch}' in r.stdout and '"status": "completed"' in r.stdout


#: the arguments that make ``python -m spark_jobs.runtime.run_epoch`` run the flights pipeline
FLIGHTS = ("--jobs", "spark_jobs.flights.pipeline:PIPELINE", "--pipeline", "flights_daily")
