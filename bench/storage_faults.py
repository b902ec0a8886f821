"""Storage faults through a real fault-injecting proxy (toxiproxy) between the checkpointing
library and the S3 endpoint, for the fault suite (bench/faults.py).

A two-task pipeline of the library alone (no Spark: the faults are in the storage path)
runs epochs over numbered input batches while toxics switch on and off at random: latency,
a bandwidth limit, connections that stall (timeout), connections reset by the peer,
responses cut short (limit_data) and data sliced into small delayed pieces. ``source``
keeps the consumed batch numbers in its state and outputs the new rows; ``total`` restores
every row seen so far, adds its upstream's rows and publishes the total. A failed try is
retried as the next attempt, as Airflow would; the run ends with the proxy clean. Then,
reading directly (not through the proxy): every document parses, every completed epoch's
files verify, and the published total holds each landed row exactly once.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from checkpointing import CheckpointConfig, Coordinator, SnapshotWriter, read_manifest, verify_epoch
from checkpointing.errors import CheckpointError
from checkpointing.protocol.barrier import TaskPlan
from checkpointing.protocol.documents import decode
from checkpointing.protocol.layout import Layout
from checkpointing.storage.s3 import S3Storage

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".tools" / "bin" / "toxiproxy-server"
PLAN = {"source": TaskPlan(), "total": TaskPlan(("source",), publishes=True)}
ROWS_PER_BATCH = 50
#: protocol documents by file name (the rest are state and output files), from the Layout
#: itself so that a renamed document cannot silently drop out of the check
_L = Layout("p")
DOCUMENTS = {k.rsplit("/", 1)[-1] for k in (
    _L.counter, _L.barrier(1), _L.metadata(1), _L.alert(1), _L.failure_record(1), _L.lease(1),
    _L.manifest, _L.lineage_origin("l"))}
#: toxic name -> (type, attributes, stream). Toxicity is 1: toxiproxy draws it per
#: connection and botocore keeps its connection alive, so a partial toxicity hits all
#: requests or none; the intermittency comes from switching the toxic on and off instead.
TOXICS: dict[str, tuple[str, dict[str, Any], str]] = {
    "latency": ("latency", {"latency": 250, "jitter": 200}, "downstream"),
    "bandwidth": ("bandwidth", {"rate": 16}, "downstream"),
    "timeout": ("timeout", {"timeout": 1500}, "downstream"),
    "reset_peer": ("reset_peer", {"timeout": 20}, "upstream"),
    "limit_data": ("limit_data", {"bytes": 2000}, "downstream"),
    "slicer": ("slicer", {"average_size": 32, "size_variation": 16, "delay": 20000},
               "downstream"),
}


class Toxiproxy:
    """A toxiproxy server with one proxy in front of ``upstream`` (host:port)."""

    def __init__(self, upstream: str):
        from bench.harness.s3server import free_port

        self.api_port, self.listen_port = free_port(), free_port()
        self.proc = subprocess.Popen([str(BIN), "-host", "127.0.0.1", "-port",
                                      str(self.api_port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while True:
            try:
                self._call("GET", "/version")
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("toxiproxy-server did not start") from None
                time.sleep(0.1)
        self._call("POST", "/proxies", {"name": "s3", "upstream": upstream,
                                        "listen": f"127.0.0.1:{self.listen_port}"})
        self.endpoint = f"http://127.0.0.1:{self.listen_port}"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def toxic_on(self, name: str) -> None:
        kind, attrs, stream = TOXICS[name]
        try:
            self._call("POST", "/proxies/s3/toxics", {"name": name, "type": kind,
                                                      "stream": stream, "toxicity": 1.0,
                                                      "attributes": attrs})
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # 409: already on (an earlier call landed late)
                raise

    def toxic_off(self, name: str) -> None:
        try:
            self._call("DELETE", f"/proxies/s3/toxics/{name}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # 404: not on
                raise

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _flapper(proxy: Toxiproxy, toxic: str, rng: random.Random,
             stop: threading.Event) -> None:
    """Switch ``toxic`` on and off at random intervals until ``stop``; it starts on. A
    control call that fails (toxiproxy's API can stall while connections drain) is tried
    again at the next switch instead of ending the thread with the toxic left on."""
    on = False
    while True:
        try:
            (proxy.toxic_off if on else proxy.toxic_on)(toxic)
            on = not on
        except OSError:
            pass
        if stop.wait(rng.uniform(0.5, 2.5) if on else rng.uniform(0.3, 1.5)):
            break
    for _ in range(5):  # the drain that follows must run on a clean proxy
        try:
            proxy.toxic_off(toxic)
            break
        except OSError:
            time.sleep(1)


def _read_json_output(storage, handle, output: str) -> list[int]:  # noqa: ANN001
    out = handle.outputs.get(output)
    rows: list[int] = []
    for f in out.files if out else []:
        rows += json.loads(storage.read(storage.key_for_uri(f.uri))[0])
    return rows


def _run_task(c: Coordinator, epoch: int, task: str, attempt: int, landed: int,
              tmp: Path) -> None:
    start = c.register_attempt(epoch, task, attempt)
    if start.existing is not None:
        return
    previous = c.restore_handle(epoch, task)
    writer = SnapshotWriter(c.storage, c.layout, epoch, task, attempt, previous=previous)
    work = tmp / f"{task}-{epoch}-{attempt}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "state").mkdir(parents=True)
    if task == "source":
        consumed = set(previous.offsets or []) if previous else set()
        new = [b for b in range(1, landed + 1) if b not in consumed]
        rows = [b * 1000 + i for b in new for i in range(ROWS_PER_BATCH)]
        (work / "out.json").write_text(json.dumps(rows))
        writer.stage_output("rows", [work / "out.json"], rows=len(rows))
        handle = writer.handle(offsets=sorted(consumed | set(new)))
    else:
        seen: list[int] = []
        if previous is not None:
            seen = json.loads(c.storage.read(c.storage.key_for_uri(previous.files[0].uri))[0])
        up = c.upstream_handles(epoch, task)["source"]
        total = seen + _read_json_output(c.storage, up, "rows")
        (work / "state" / "total.json").write_text(json.dumps(total))
        writer.add_directory(work / "state")
        (work / "pub.json").write_text(json.dumps(total))
        writer.stage_output("total", [work / "pub.json"], rows=len(total))
        handle = writer.handle()
    c.acknowledge(epoch, task, attempt, handle)


def _epoch(c: Coordinator, run_id: str, attempt: int, landed: int, tmp: Path) -> str:
    b = c.open_epoch_for_run(run_id) or c.begin_epoch(PLAN, run_id)
    for task in PLAN:
        _run_task(c, b.epoch_id, task, attempt, landed, tmp)
    return c.complete(b.epoch_id).status


def run_storage_fault(server, toxic: str, seed: int, tmp: Path,  # noqa: ANN001
                      runs: int = 4) -> tuple[str, int, int, str]:
    """(outcome, rows lost, rows duplicated, note) of one seed of one toxic."""
    if not BIN.exists():
        return "SKIPPED_no_toxiproxy", 0, 0, "run scripts/install_toxiproxy.sh"
    rng = random.Random(seed * 31 + len(toxic))
    bucket, prefix = "faults", f"toxic-{toxic}-{seed}"
    proxy = Toxiproxy(server.endpoint.removeprefix("http://"))
    direct = S3Storage(bucket, prefix, endpoint_url=server.endpoint)
    config = CheckpointConfig(timeout_seconds=300, retained_epochs=2)
    errors: dict[str, int] = {}
    stop = threading.Event()
    flapper = threading.Thread(target=_flapper, args=(proxy, toxic, rng, stop), daemon=True)
    work = tmp / f"toxic-{toxic}-{seed}"
    completed_runs = requests = 0
    try:
        flapper.start()
        for run in range(1, runs + 1):
            for attempt in range(1, 11):
                proxied = S3Storage(bucket, prefix, endpoint_url=proxy.endpoint,
                                    connect_timeout=1, read_timeout=2, max_attempts=3)
                c = Coordinator(proxied, "toxic", config=config)
                try:
                    _epoch(c, f"run-{run}", attempt, run, work)
                    completed_runs += 1
                    break
                except (CheckpointError, OSError) as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    time.sleep(0.5)  # the task's retry delay
                finally:
                    requests += proxied.stats.total
        stop.set()
        flapper.join()
        # A last run on a clean proxy drains whatever the faulty runs left undone.
        c = Coordinator(S3Storage(bucket, prefix, endpoint_url=proxy.endpoint), "toxic",
                        config=config)
        for o in c.registry().open:
            if c.metadata(o.epoch_id) is None:
                c.abort(o.epoch_id, "superseded", "left open by a faulty run")
        _epoch(c, "drain", 1, runs, work)
        return _check(direct, runs, completed_runs, errors, requests)
    finally:
        stop.set()
        proxy.stop()
        shutil.rmtree(work, ignore_errors=True)


def _check(direct: S3Storage, runs: int, completed_runs: int, errors: dict[str, int],
           requests: int) -> tuple[str, int, int, str]:
    c = Coordinator(direct, "toxic")
    invalid = 0
    for obj in direct.list(c.layout.base):
        name = obj.key.rsplit("/", 1)[-1]
        if name in DOCUMENTS or name.endswith((".start", ".ack", ".decline")):
            raw = direct.read(obj.key)[0]
            try:
                decode(raw, json.loads(raw).get("format"), obj.key)
            except (CheckpointError, ValueError, AttributeError):
                invalid += 1
    unverified = [e for e in c.epoch_ids() if c.status(e) == "completed"
                  and not verify_epoch(c, e).ok]
    m = read_manifest(direct, c.layout)
    got = json.loads(direct.read(direct.key_for_uri(m.outputs["total"].files[0].uri))[0])
    want = {b * 1000 + i for b in range(1, runs + 1) for i in range(ROWS_PER_BATCH)}
    lost = len(want - set(got))
    dup = len(got) - len(set(got)) + len(set(got) - want)
    statuses = [c.status(e) for e in c.epoch_ids()]
    ok = not invalid and not unverified
    outcome = (f"{'clean' if ok else 'CORRUPT'}:runs_completed_under_fault="
               f"{completed_runs}/{runs}:epochs_aborted={statuses.count('aborted')}")
    note = (f"{requests} requests through the proxy; failed tries retried as the next "
            f"attempt: {errors or 'none'}; invalid documents {invalid}")
    return outcome, lost, dup, note
