"""The fault-injection suite (`make faults`; `make soak` for many seeds): tries to break
exactly-once publishing and records what happened in bench/results/faults.json, one object
per fault kind with keys ``fault``, ``runs``, ``outcomes``, ``rows_lost``,
``rows_duplicated`` (and ``seconds``, ``notes``).

    python bench/faults.py [--soak] [--seeds N] [--only KIND ...] [--out PATH]
                           [--remote sc://HOST:PORT]

Every run ends by comparing the published gold tables with an independent pandas
computation over the raw files (bench/harness/oracle.py): ``rows_lost`` counts accepted flights
missing from the published enriched table plus flights missing from the route totals,
``rows_duplicated`` extra or repeated ones. A run whose published route statistics differ
from the oracle in any value is an outcome ``WRONG``. Kills and freezes are real signals to
real processes (bench/fault_child.py); storage faults go through a real toxiproxy.

With ``--remote`` every epoch's Spark work runs on that Spark Connect server (the
deployment's mode): a killed child is then a killed client, whose server-side session and
queries outlive it as they would in production. Without it each process has its own
local Spark.
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from bench.harness import oracle  # noqa: E402
from bench.harness.race import race  # noqa: E402
from checkpointing import CheckpointConfig, Coordinator, LocalStorage  # noqa: E402
from checkpointing.errors import CheckpointError  # noqa: E402
from spark_jobs.flights.landing import land  # noqa: E402
from spark_jobs.flights.pipeline import EDGES, PLAN, run_epoch  # noqa: E402
from spark_jobs.runtime import DeclineEpoch, spark_session  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CHILD = ROOT / "bench" / "fault_child.py"
PIPELINE = "flights_daily"
DAY0 = date(2013, 1, 1)
CONFIG = CheckpointConfig(timeout_seconds=600, retained_epochs=2, lease_seconds=5)
TASK_POINTS = ["before_write", "mid_write", "after_snapshot", "after_ack"]
#: outcome fragments that mean a guarantee broke or a fault could not be injected
BROKEN = ("WRONG", "NOT_", "SUITE_ERROR", "CRASHED", "UNEXPECTED", "SKIPPED", "=False",
          "CORRUPT")


def day(n: int) -> str:
    """ISO date of day n of 2013 (1-based)."""
    return (DAY0 + timedelta(days=n - 1)).isoformat()


def interval(until: int) -> dict[str, str]:
    """The data interval whose epoch consumes the files of days before day ``until``."""
    return {"start": day(until - 1), "end": day(until)}


@dataclass
class FaultResult:
    """One fault kind's row of the matrix."""

    fault: str
    runs: int = 0
    outcomes: Counter = field(default_factory=Counter)
    rows_lost: int = 0
    rows_duplicated: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"fault": self.fault, "runs": self.runs, "outcomes": dict(self.outcomes),
                "rows_lost": self.rows_lost, "rows_duplicated": self.rows_duplicated,
                "seconds": round(self.seconds, 1), "notes": self.notes[:40]}

    def add(self, outcome: str, lost: int, dup: int) -> None:
        self.runs += 1
        self.outcomes[outcome] += 1
        self.rows_lost += lost
        self.rows_duplicated += dup
        # One line per finished run: a long matrix shows where it is, and a caller can tell
        # a slow machine (runs keep finishing) from a hang (none does).
        print(f"  {self.fault}: {outcome} (lost {lost}, duplicated {dup})", flush=True)


# ---------------------------------------------------------------------------- fixtures
class Workspace:
    """A fresh copy of the base: raw days 1..4 landed, epoch 1 (day 1) completed. Always
    at the same path, where the base was built: state handles hold absolute URIs."""

    def __init__(self, snapshot: Path, into: Path):
        shutil.rmtree(into, ignore_errors=True)
        shutil.copytree(snapshot, into)
        self.root = into
        self.data = LocalStorage(into / "data")
        self.data_uri = f"file://{into}/data"
        self.ckpt_uri = f"file://{into}/ckpt"

    def coordinator(self, **kw: Any) -> Coordinator:
        return Coordinator(LocalStorage(self.root / "ckpt"), PIPELINE,
                           config=kw.pop("config", CONFIG), **kw)


def make_base(spark, path: Path, days: int = 4) -> Path:
    data = LocalStorage(path / "data")
    land(data, [DAY0 + timedelta(days=i) for i in range(days)], seed=3)
    c = Coordinator(LocalStorage(path / "ckpt"), PIPELINE, config=CONFIG)
    run_epoch(c, spark, f"file://{path}/data", "base-1", data_interval=interval(2))
    return path


def measure(c: Coordinator, data: LocalStorage, until: int) -> tuple[str, int, int]:
    """("ok" or "WRONG", rows lost, rows duplicated) of the published tables against the
    oracle over the raw files of days before ``until``."""
    rows, _, _ = oracle.clean_flights(oracle.raw_files(data, day(until)))
    want = Counter(map(tuple, rows[oracle.KEY].astype(str).values.tolist()))
    m = c.catalog.manifest()
    if m is None:
        return "WRONG", sum(want.values()), 0
    got_rows = oracle.published(c, "gold_flights_enriched")
    got = Counter(map(tuple, got_rows[oracle.KEY].astype(str).values.tolist()))
    lost = sum((want - got).values())
    dup = sum((got - want).values())
    keys = ["origin", "dest"]
    want_stats = oracle.stats(rows, keys)
    got_stats = oracle.published(c, "gold_route_stats")[keys + oracle.METRIC_COLS]
    j = want_stats.merge(got_stats, on=keys, how="outer", suffixes=("_w", "_g")).fillna(0)
    lost = max(lost, int((j["flights_w"] - j["flights_g"]).clip(lower=0).sum()))
    dup = max(dup, int((j["flights_g"] - j["flights_w"]).clip(lower=0).sum()))
    try:
        pd.testing.assert_frame_equal(
            got_stats.sort_values(keys).reset_index(drop=True), want_stats,
            check_dtype=False, check_exact=False, rtol=1e-9)
        verdict = "ok"
    except AssertionError:
        verdict = "WRONG"
    return verdict, lost, dup


def child(args: list[str], **kw: Any) -> subprocess.Popen:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(CHILD), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


#: the Spark Connect server of --remote, or None for a local Spark in each process
REMOTE: str | None = None


def child_epoch(ws: Workspace, run_id: str, until: int, fault: str | None = None,
                attempt: int = 1) -> subprocess.Popen:
    args = ["epoch", "--storage", ws.ckpt_uri, "--data", ws.data_uri, "--run-id", run_id,
            "--until", day(until), "--attempt", str(attempt)]
    return child(args + (["--fault", fault] if fault else []) +
                 (["--remote", REMOTE] if REMOTE else []))


def resume(ws: Workspace, spark, run_id: str, until: int, attempt: int) -> str:
    """What the DAG run's retry does: continue the run's open epoch with the next attempt
    (or begin it when the crash came before its barrier). Returns the epoch's status."""
    c = ws.coordinator()
    open_epoch = c.open_epoch_for_run(run_id)
    if open_epoch is None and c.latest_completed() is not None and \
            c.barrier(c.latest_completed()).run_id == run_id:
        return "completed"
    # A frozen driver still holds the epoch's lease: the retry waits for it to expire
    # (one driver per epoch, PROTOCOL 5.13), then runs above its attempt.
    _, meta = run_epoch(c, spark, ws.data_uri, run_id, attempt=attempt,
                        epoch_id=open_epoch.epoch_id if open_epoch else None,
                        data_interval=interval(until),
                        wait_for_driver=3 * CONFIG.lease_seconds)
    return meta.status if meta else "pending"


def wait_stopped(proc: subprocess.Popen, timeout: float = 300) -> bool:
    """Wait until ``proc`` is stopped by SIGSTOP (state T) or exits."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in ("T", "t"):
            return True
        time.sleep(0.2)
    return False


# ---------------------------------------------------------------------------- faults
def fault_sigkill_points(ctx: Context, res: FaultResult) -> None:
    """SIGKILL a Spark job at each named point of a random task; the retry recovers."""
    for seed in range(ctx.seeds):
        rng = random.Random(seed)
        for point in TASK_POINTS:
            task = rng.choice(list(EDGES))
            ws = ctx.workspace()
            proc = child_epoch(ws, "r2", 3, f"{task}:{point}:kill")
            proc.communicate(timeout=600)
            if proc.returncode != -signal.SIGKILL:
                res.notes.append(f"{task}:{point}: child exited {proc.returncode}, not killed")
            status = resume(ws, ctx.spark, "r2", 3, attempt=2)
            verdict, lost, dup = measure(ws.coordinator(), ws.data, 3)
            res.add(f"killed:{point}->{status}:{verdict}", lost, dup)


def fault_sigkill_random(ctx: Context, res: FaultResult) -> None:
    """SIGKILL the epoch's process after a random delay; the retry recovers."""
    for seed in range(ctx.seeds * 2):
        rng = random.Random(100 + seed)
        ws = ctx.workspace()
        delay = rng.uniform(2.0, ctx.clean_child_seconds)
        proc = child_epoch(ws, "r2", 3)
        try:
            proc.wait(timeout=delay)
            outcome = "finished_before_kill"
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            outcome = f"killed_at_{delay:.0f}s"
        proc.communicate()
        status = resume(ws, ctx.spark, "r2", 3, attempt=2)
        verdict, lost, dup = measure(ws.coordinator(), ws.data, 3)
        res.add(f"{'killed' if outcome != 'finished_before_kill' else outcome}->{status}:"
                f"{verdict}", lost, dup)
        res.notes.append(f"seed {seed}: {outcome}")


def fault_coordinator_crash(ctx: Context, res: FaultResult) -> None:
    """The committing process dies before writing ``_metadata``, or after it but before
    publishing; a retry of the commit (or the next run's begin) recovers."""
    for _ in range(ctx.seeds):
        for point in ("before_decision", "after_decision"):
            ws = ctx.workspace()
            c = ws.coordinator()
            epoch, _ = run_epoch(c, ctx.spark, ws.data_uri, "r2", stop_after="validate",
                                 data_interval=interval(3))
            proc = child(["complete", "--storage", ws.ckpt_uri, "--epoch", str(epoch),
                          "--fault", f"{point}:kill"])
            proc.communicate(timeout=120)
            killed = proc.returncode == -signal.SIGKILL
            c2 = ws.coordinator()
            before = c2.catalog.manifest()
            published_before = before.epoch_id if before else None
            if point == "before_decision":
                meta = c2.complete(epoch)  # the commit step's retry
            else:
                c2.begin_epoch(PLAN, "r3", data_interval=interval(4))  # the next run
                meta = c2.metadata(epoch)
            after = c2.catalog.manifest()
            publications = sum(1 for h in after.history if h["epoch_id"] == epoch)
            verdict, lost, dup = measure(c2, ws.data, 3)
            res.add(f"{point}:{'killed' if killed else 'NOT_KILLED'}->{meta.status}:"
                    f"published_once={publications == 1 and published_before != epoch}:"
                    f"{verdict}", lost, dup)


def fault_races(ctx: Context, res: FaultResult) -> None:
    """16 concurrent begin-epoch callers and 16 concurrent completers, on S3."""
    from checkpointing.storage.s3 import S3Storage

    server, bucket = ctx.s3()
    for seed in range(ctx.seeds):
        st = S3Storage(bucket, f"races-{seed}", endpoint_url=server.endpoint)
        c = Coordinator(st, "races", config=CheckpointConfig(max_concurrent_epochs=16))
        def begin(i: int, c: Coordinator = c) -> int:
            return c.begin_epoch({"t": PLAN["ingest_flights"]}, f"b{i}").epoch_id

        ids = _threads(16, begin)
        distinct = len(set(ids)) == 16 and sorted(ids) == list(range(1, 17))
        res.add(f"begin_x16:distinct_ids={distinct}", 0, 0)
        # 16 completers of one real pipeline epoch, every task acknowledged.
        ws = ctx.workspace()
        cw = ws.coordinator()
        epoch, _ = run_epoch(cw, ctx.spark, ws.data_uri, "r2", stop_after="validate",
                             data_interval=interval(3))
        def complete(i: int, ws: Any = ws, epoch: int = epoch) -> Any:
            return ws.coordinator().complete(epoch)

        metas = _threads(16, complete)
        agree = len({(m.status, m.decided_at) for m in metas}) == 1
        hist = cw.catalog.manifest().history
        once = sum(1 for h in hist if h["epoch_id"] == epoch) == 1
        verdict, lost, dup = measure(cw, ws.data, 3)
        res.add(f"complete_x16:one_decision={agree}:published_once={once}:{verdict}", lost, dup)
    res.notes.append("begin race on S3 (the pipeline's own storage is local in this fault); "
                     "complete race on the local backend with a real epoch")


def _threads(n: int, fn: Callable[[int], Any]) -> list[Any]:
    results, errors = race(fn, n)
    if errors:
        raise errors[0]
    return results


def fault_zombie(ctx: Context, res: FaultResult) -> None:
    """Attempt 1 is frozen (SIGSTOP); attempt 2 finishes the epoch (and, in the second
    variant, the next epoch publishes too); attempt 1 resumes and tries to acknowledge or
    to complete and publish."""
    for seed in range(ctx.seeds):
        rng = random.Random(200 + seed)
        for variant in ("before_ack", "before_commit"):
            ws = ctx.workspace()
            task = rng.choice(list(EDGES))
            fault = f"{task}:after_snapshot:stop" if variant == "before_ack" else \
                "validate:before_commit:stop"
            proc = child_epoch(ws, "r2", 3, fault)
            if not wait_stopped(proc):
                out, err = proc.communicate()
                res.add(f"{variant}:NOT_STOPPED", 0, 0)
                res.notes.append(err.strip().splitlines()[-1] if err.strip() else "no output")
                continue
            status = resume(ws, ctx.spark, "r2", 3, attempt=2)
            c = ws.coordinator()
            if variant == "before_commit":
                run_epoch(c, ctx.spark, ws.data_uri, "r3", data_interval=interval(4))
            published = c.catalog.manifest().epoch_id
            proc.send_signal(signal.SIGCONT)
            _, err = proc.communicate(timeout=300)
            if proc.returncode == 2:
                zombie = "refused"
                res.notes.append(f"zombie {variant}: {err.strip().splitlines()[-1][:200]}")
            elif proc.returncode == 0 and variant == "before_commit":
                zombie = "noop"  # its complete() returned the decided epoch, published nothing
            else:
                zombie = f"UNEXPECTED_exit{proc.returncode}"
            after = c.catalog.manifest().epoch_id
            verdict, lost, dup = measure(c, ws.data, 4 if variant == "before_commit" else 3)
            res.add(f"{variant}:attempt2->{status}:zombie_{zombie}:"
                    f"manifest_kept={published == after}:{verdict}", lost, dup)


def fault_storage(ctx: Context, res: FaultResult) -> None:
    """A mini pipeline on S3 through toxiproxy, see bench/storage_faults.py."""
    from bench.storage_faults import TOXICS, run_storage_fault

    server, _ = ctx.s3()
    for seed in range(ctx.seeds):
        for toxic in TOXICS:
            outcome, lost, dup, note = run_storage_fault(server, toxic, seed, ctx.tmp)
            res.add(f"{toxic}:{outcome}", lost, dup)
            res.notes.append(f"{toxic} seed {seed}: {note}")


def fault_corrupt_state(ctx: Context, res: FaultResult) -> None:
    """A state file of the latest epoch is flipped, truncated or deleted; the next epoch
    verifies, falls back to the previous completed epoch and replays from there."""
    kinds = ["flip", "truncate", "delete"]
    epoch2 = ctx.tmp / "epoch2-snapshot"  # epoch 2 completed, run once, copied per kind
    ws = ctx.workspace()
    run_epoch(ws.coordinator(), ctx.spark, ws.data_uri, "r2", data_interval=interval(3))
    shutil.copytree(ws.root, epoch2)
    for seed in range(ctx.seeds):
        rng = random.Random(300 + seed)
        for kind in kinds:
            ws = Workspace(epoch2, ctx.tmp / "ws")
            c = ws.coordinator()
            handles = c.completed_handles(2)
            task = rng.choice(sorted(t for t, h in handles.items() if h.files))
            ref = rng.choice(handles[task].files)
            key = c.storage.key_for_uri(ref.uri)
            data = c.storage.read(key)[0]
            if kind == "flip":
                i = rng.randrange(len(data))
                c.storage.write(key, data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
            elif kind == "truncate":
                c.storage.write(key, data[: len(data) // 2])
            else:
                c.storage.delete(key)
            c3 = ws.coordinator()
            eid, meta = run_epoch(c3, ctx.spark, ws.data_uri, "r3", data_interval=interval(4))
            b = c3.barrier(eid)
            skipped = [s["epoch_id"] for s in b.restore_fallback]
            verdict, lost, dup = measure(c3, ws.data, 4)
            res.add(f"{kind}:parent={b.parent_epoch_id}:skipped={skipped}:{meta.status}:"
                    f"{verdict}", lost, dup)
            if b.restore_fallback:
                res.notes.append(f"{kind} {task}: {b.restore_fallback[0]['problems'][0][:160]}")


def fault_malformed_input(ctx: Context, res: FaultResult) -> None:
    """Malformed rows and a whole unreadable file are quarantined and counted; a day that
    fails the Great Expectations suite declines its epoch and publishes nothing."""
    for seed in range(ctx.seeds):
        ws = ctx.workspace()
        rep = land(ws.data, [DAY0 + timedelta(days=1)], malformed_rate=0.02, seed=400 + seed)
        land(ws.data, [DAY0 + timedelta(days=2)], unreadable={DAY0 + timedelta(days=2)})
        c = ws.coordinator()
        try:
            eid, meta = run_epoch(c, ctx.spark, ws.data_uri, "r2", data_interval=interval(4))
            status = meta.status
        except Exception as exc:  # noqa: BLE001 - a crashed epoch is the failure looked for
            res.add(f"rows:CRASHED:{type(exc).__name__}", 0, 0)
            continue
        counts = c.completed_handles(eid)["ingest_flights"].row_counts
        injected = sum(rep.malformed.values())
        counted = counts.get("rows_quarantined")
        verdict, lost, dup = measure(c, ws.data, 4)
        files = counts.get("files_unreadable")
        res.add(f"rows+file:{status}:all_malformed_quarantined={counted == injected > 0}:"
                f"file_quarantined={files == 1}:{verdict}", lost, dup)
        res.notes.append(f"seed {seed}: {counted} of {injected} injected malformed rows "
                         f"quarantined, {files} unreadable file")

        # A parseable day whose delays are implausible: the GX suite declines the epoch.
        before = c.catalog.manifest()
        raw = pd.read_csv(io.BytesIO(ws.data.read(f"raw/flights/{day(4)}.csv")[0]))
        ws.data.write(f"raw/flights/{day(4)}.csv",
                      raw.assign(dep_delay=1000.0).to_csv(index=False).encode())
        try:
            run_epoch(c, ctx.spark, ws.data_uri, "r3", data_interval=interval(5))
            outcome = "gx:NOT_DECLINED"
        except DeclineEpoch:
            outcome = "gx:declined"
        unchanged = c.catalog.manifest() == before
        verdict, lost, dup = measure(c, ws.data, 4)
        res.add(f"{outcome}:nothing_published={unchanged}:{verdict}", lost, dup)


def fault_bad_metadata(ctx: Context, res: FaultResult) -> None:
    """Future-version, truncated and garbage metadata: one clear error, the same on every
    try (no crash loop), nothing overwritten; once an operator restores the document the
    pipeline continues and loses nothing."""
    corruptions: dict[str, Callable[[bytes], bytes]] = {
        "future_version": lambda b: json.dumps(
            {**json.loads(b), "protocol_version": "2.0"}).encode(),
        "truncated": lambda b: b[: len(b) // 2],
        "garbage": lambda b: bytes(random.Random(len(b)).randrange(256) for _ in range(64)),
    }
    first_kind = next(iter(corruptions))
    for _ in range(ctx.seeds):
        for kind, corrupt in corruptions.items():
            for doc in ("registry", "metadata", "manifest"):
                ws = ctx.workspace()
                c = ws.coordinator()
                key = {"registry": c.layout.counter, "metadata": c.layout.metadata(1),
                       "manifest": c.layout.manifest}[doc]
                original = c.storage.read(key)[0]
                c.storage.write(key, corrupt(original))
                bad = c.storage.read(key)[0]
                errors = []
                for _try in range(3):
                    c2 = ws.coordinator()
                    try:
                        run_epoch(c2, ctx.spark, ws.data_uri, "r2", data_interval=interval(3))
                        errors.append("no error")
                    except CheckpointError as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")
                kept = c.storage.read(key)[0] == bad
                same = len(set(errors)) == 1
                one_line = all("\n" not in e for e in errors)
                c.storage.write(key, original)  # the operator repairs it
                c3 = ws.coordinator()
                for o in c3.registry().open:  # and aborts what the refused tries left open
                    c3.abort(o.epoch_id, "superseded", "fault suite cleanup")
                then: str
                if kind == first_kind:
                    # The pipeline continues from the repaired document: once per document
                    # (what the repair restores does not depend on how it was broken).
                    _, meta = run_epoch(c3, ctx.spark, ws.data_uri, "r2b",
                                        data_interval=interval(3))
                    then, (verdict, lost, dup) = meta.status, measure(c3, ws.data, 3)
                else:  # the refused tries lost nothing: day 1 is still published whole
                    then, (verdict, lost, dup) = "intact", measure(c3, ws.data, 2)
                refused = errors[0] != "no error"
                res.add(f"{kind}:{doc}:refused={refused}:same_each_try={same}:"
                        f"one_line={one_line}:not_overwritten={kept}:then->{then}:"
                        f"{verdict}", lost, dup)
                res.notes.append(f"{kind} {doc}: {errors[0][:200]}")


def fault_runner_lost(ctx: Context, res: FaultResult) -> None:
    """SIGKILL the process driving an epoch; a *different* run then begins: it aborts the
    dead run's epoch as runner_lost once its lease expired (not after the hour-long
    timeout), and its own epoch consumes the input the dead one never published."""
    for seed in range(ctx.seeds):
        ws = ctx.workspace()
        proc = child_epoch(ws, "r2", 3, f"{random.Random(seed).choice(list(EDGES))}:"
                                        "after_ack:kill")
        proc.communicate(timeout=600)
        c = ws.coordinator()
        dead = c.open_epoch_for_run("r2")
        t0 = time.time()
        while True:
            try:
                _, meta = run_epoch(c, ctx.spark, ws.data_uri, "r3",
                                    data_interval=interval(4))
                break
            except CheckpointError as exc:  # the lease has not expired yet
                if time.time() - t0 > 60 or "max_concurrent_epochs" not in str(exc):
                    raise
                time.sleep(1)
        lost_meta = c.metadata(dead.epoch_id) if dead else None
        reason = lost_meta.reason if lost_meta else "none"
        verdict, lost, dup = measure(c, ws.data, 4)
        res.add(f"killed->{reason}->{meta.status}:{verdict}", lost, dup)
        res.notes.append(f"seed {seed}: freed after {time.time() - t0:.1f}s")


FAULTS: dict[str, Callable[[Context, FaultResult], None]] = {
    "sigkill_at_points": fault_sigkill_points,
    "sigkill_random_time": fault_sigkill_random,
    "coordinator_crash": fault_coordinator_crash,
    "concurrent_races": fault_races,
    "zombie_attempt": fault_zombie,
    "storage_faults_toxiproxy": fault_storage,
    "corrupt_state": fault_corrupt_state,
    "malformed_input": fault_malformed_input,
    "bad_metadata": fault_bad_metadata,
    "runner_lost": fault_runner_lost,
}


# ---------------------------------------------------------------------------- driver
class Context:
    """What every fault shares: one Spark session, the base workspace, an S3 server."""

    def __init__(self, spark, tmp: Path, seeds: int):
        self.spark, self.tmp, self.seeds = spark, tmp, seeds
        self.snapshot = tmp / "base-snapshot"
        t0 = time.perf_counter()
        shutil.copytree(make_base(spark, tmp / "ws"), self.snapshot)
        print(f"  base: epoch 1 completed in {time.perf_counter() - t0:.0f} s", flush=True)
        self._s3: tuple[Any, str] | None = None
        self.clean_child_seconds = 30.0

    def workspace(self) -> Workspace:
        return Workspace(self.snapshot, self.tmp / "ws")

    def s3(self) -> tuple[Any, str]:
        if self._s3 is None:
            from bench.harness.s3server import ACCESS_KEY, SECRET_KEY, start_s3_server

            # The server started here has these root credentials: the clients must use
            # them, whatever AWS_* the parent left in the environment (a CI run once
            # inherited other keys and got InvalidAccessKeyId).
            os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = \
                ACCESS_KEY, SECRET_KEY
            server = start_s3_server()
            bucket = "faults"
            server.client().create_bucket(Bucket=bucket)
            self._s3 = (server, bucket)
        return self._s3

    def close(self) -> None:
        if self._s3:
            self._s3[0].stop()


def measure_clean_child(ctx: Context) -> float:
    """Seconds a clean child epoch takes here: the range random kills are drawn from."""
    ws = ctx.workspace()
    t0 = time.perf_counter()
    proc = child_epoch(ws, "r2", 3)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"clean child epoch failed: {err.strip()[-2000:]}")
    return time.perf_counter() - t0


def run_suite(kinds: list[str], seeds: int, tmp: Path) -> list[FaultResult]:
    spark = spark_session("fault-suite", remote=REMOTE)
    ctx = Context(spark, tmp, seeds)
    results = []
    try:
        if "sigkill_random_time" in kinds:
            ctx.clean_child_seconds = measure_clean_child(ctx)
        for kind in kinds:
            res = FaultResult(kind)
            t0 = time.perf_counter()
            try:
                FAULTS[kind](ctx, res)
            except Exception as exc:  # noqa: BLE001 - the matrix records it and goes on
                traceback.print_exc()
                res.add(f"SUITE_ERROR:{type(exc).__name__}", 0, 0)
                res.notes.append(f"{type(exc).__name__}: {str(exc)[:300]}")
            res.seconds = time.perf_counter() - t0
            results.append(res)
            print_row(res)
    finally:
        ctx.close()
        spark.stop()  # on a Connect server: releases this client's session
    return results


def print_row(r: FaultResult) -> None:
    outs = ", ".join(f"{k} x{v}" for k, v in sorted(r.outcomes.items()))
    print(f"{r.fault:26} runs={r.runs:3} lost={r.rows_lost:5} dup={r.rows_duplicated:5} "
          f"{r.seconds:6.0f}s  {outs}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="faults", description=__doc__.split("\n\n")[0])
    ap.add_argument("--soak", action="store_true", help="many seeds (long)")
    ap.add_argument("--seeds", type=int, help="seeds per fault (default 1, soak 5)")
    ap.add_argument("--only", nargs="*", choices=sorted(FAULTS), help="fault kinds to run")
    ap.add_argument("--out", type=Path, default=RESULTS / "faults.json")
    ap.add_argument("--remote", help="run Spark on this Spark Connect server (sc://host:port), "
                    "or 'auto': start one for the run (as the test suite does)")
    a = ap.parse_args(argv)
    faulthandler.enable()  # SIGABRT from a caller that gave up prints where every thread is
    global REMOTE
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    server = _own_connect_server() if a.remote == "auto" else None
    REMOTE = server.url if server else a.remote
    try:
        return _run(a)
    finally:
        if server:
            server.stop()


def _own_connect_server():
    """A Spark Connect server for this run, with the S3 server's credentials (a deployment
    gives its server a role; clients never send credentials)."""
    from bench.harness.s3server import ACCESS_KEY, SECRET_KEY
    from spark_jobs.runtime.connect_server import ConnectServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    return ConnectServer(port=0, driver_memory="1500m", extra_env={
        "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"]}).start()


def _run(a: argparse.Namespace) -> int:
    seeds = a.seeds or (5 if a.soak else 1)
    kinds = a.only or list(FAULTS)
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-faults-"))
    t0 = time.perf_counter()
    try:
        results = run_suite(kinds, seeds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps([r.to_json() for r in results], indent=2) + "\n")
    bad = [r.fault for r in results if r.rows_lost or r.rows_duplicated or any(
        b in o for o in r.outcomes for b in BROKEN)]
    print(f"{len(results)} fault kinds, {sum(r.runs for r in results)} runs in "
          f"{time.perf_counter() - t0:.0f} s; written to {a.out}")
    if bad:
        print(f"exactly-once or a guarantee BROKEN in: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
