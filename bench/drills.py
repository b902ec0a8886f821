"""Failure drills on the deployment topology: scripts/cluster.py brings up the compose
deployment as processes (CeleryExecutor with two workers, PostgreSQL, Redis, MinIO, a Spark
master, worker and Connect server), flights_daily runs daily epochs through it, and each
drill breaks one component mid-epoch; every drill ends with the published tables compared
to the independent pandas computation the tests use (bench/harness/oracle.py).

    python bench/drills.py [--only worker_kill ...] [--out bench/results/drills.json]

Rows of bench/results/drills.json have the keys of faults.json: ``fault``, ``runs``,
``outcomes``, ``rows_lost``, ``rows_duplicated`` (plus ``seconds`` and ``notes``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.faults import FaultResult  # noqa: E402
from bench.harness import oracle  # noqa: E402
from checkpointing import Coordinator, create_savepoint  # noqa: E402
from checkpointing.storage import open_storage  # noqa: E402
from scripts.cluster import Cluster, celery_workers, down, up  # noqa: E402
from spark_jobs.flights.landing import land  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "drills.json"
DAG = "flights_daily"
CKPT_API = f"/ckpt/api/dags/{DAG}"
FIRST_DAY = date(2013, 1, 1)
#: What the drills add to the compose file's environment (recorded in drills.json): a lost
#: task is noticed after 60 s instead of Airflow's 300, and retried 5 s later instead of 60.
DRILL_ENV = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "20",
    "FLIGHTS_RETRIES": "2",
    "FLIGHTS_RETRY_DELAY_SECONDS": "5",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
}
#: The Spark task a drill breaks: the longest of an epoch (it reads the day's raw file).
VICTIM_TASK = "ingest_flights"
#: Seconds into the victim task at which each ``minio_restart`` stops MinIO (the first is
#: the default single restart's): the outage falls on the restore, the Spark reads, the
#: writes or the acknowledgement, and on the tasks after it (a warm task takes 6-12 s).
MINIO_STOP_AFTER = (4, 1, 7, 2, 5, 9)


class DrillError(RuntimeError):
    pass


@dataclass(frozen=True)
class VictimKill:
    """A worker killed while it ran the victim task of a run."""

    run_id: str
    logical: date
    ti: dict  # the task instance as it was killed
    worker: str
    after: float  # seconds into the task


class Airflow:
    """The deployment's REST API as its admin (SimpleAuthManager, the compose password)."""

    def __init__(self, url: str, password: str, dag: str = DAG):
        self.url, self.dag = url, dag
        r = requests.post(f"{url}/auth/token", json={"username": "admin", "password": password},
                          timeout=30)
        r.raise_for_status()
        self.headers = {"Authorization": f"Bearer {r.json()['access_token']}"}

    def call(self, method: str, path: str, **kw: Any) -> requests.Response:
        headers = {**self.headers, **kw.pop("headers", {})}
        for attempt in range(60):  # the api-server may be briefly away (MinIO drill: no)
            try:
                return requests.request(method, f"{self.url}{path}", headers=headers,
                                        timeout=60, **kw)
            except requests.ConnectionError:
                if attempt == 59:
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")

    def trigger(self, logical: date) -> str:
        r = self.call("POST", f"/api/v2/dags/{self.dag}/dagRuns",
                      json={"logical_date": f"{logical.isoformat()}T00:00:00Z"})
        if r.status_code != 200:
            raise DrillError(f"trigger {logical}: {r.status_code} {r.text[:300]}")
        return r.json()["dag_run_id"]

    def state(self, run_id: str) -> str:
        return self.call("GET", f"/api/v2/dags/{self.dag}/dagRuns/{run_id}").json()["state"]

    def wait_run(self, run_id: str, timeout: float = 1200) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.state(run_id)
            if s in ("success", "failed"):
                return s
            time.sleep(3)
        raise DrillError(f"run {run_id} not finished in {timeout:g}s")

    def task_instances(self, run_id: str) -> dict[str, dict]:
        r = self.call("GET", f"/api/v2/dags/{self.dag}/dagRuns/{run_id}/taskInstances")
        return {t["task_id"]: t for t in r.json()["task_instances"]}

    def log_events(self, run_id: str, task_id: str, try_number: int) -> list | str:
        """A task try's log as the UI shows it (Airflow's log API, which fetches it from the
        log server of the worker that ran the try): its events, or a line saying why there
        are none."""
        r = self.call("GET", f"/api/v2/dags/{self.dag}/dagRuns/{run_id}/taskInstances/"
                      f"{task_id}/logs/{try_number}", params={"full_content": "true"},
                      headers={"Accept": "application/json"})
        if r.status_code != 200:
            return f"(log: HTTP {r.status_code})"
        content = r.json().get("content")
        return content if isinstance(content, list) else [content]

    def error_of(self, run_id: str, task_id: str, try_number: int) -> str:
        """The exception a task try's log reports (Airflow's log API), for a drill's notes:
        a failed run says why."""
        events = self.log_events(run_id, task_id, try_number)
        if isinstance(events, str):
            return events
        for e in reversed(events):  # the task's own exception, as its runner logged it
            detail = e.get("error_detail") if isinstance(e, dict) else None
            if detail:
                first = detail[0] if isinstance(detail, list) else detail
                text = f"{first.get('exc_type')}: {first.get('exc_value')}" \
                    if isinstance(first, dict) else str(first)
                return " ".join(text.split())[:300]
        return "no exception in its log (lost with its worker? see the scheduler's log)"

    def wait_task(self, run_id: str, task_id: str, states: tuple[str, ...] = ("running",),
                  min_try: int = 1, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ti = self.task_instances(run_id).get(task_id)
            if ti and ti["state"] in states and ti["try_number"] >= min_try:
                return ti
            time.sleep(1)
        raise DrillError(f"{task_id} of {run_id} not {states} (try >= {min_try}) in "
                         f"{timeout:g}s")


# --------------------------------------------------------------------------- processes
def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def task_process(ti_id: str) -> int | None:
    """The process running a task instance: the task SDK titles it ``airflow worker --
    <ti id>``."""
    title = f"airflow worker -- {ti_id}".encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().replace(b"\0", b" ").strip() == title:
                    return int(d.name)
            except OSError:
                continue
    return None


def worker_of(cluster: Cluster, ti_id: str, timeout: float = 60) -> str:
    """The Celery worker service whose process tree runs the task instance."""
    by_pid = {s.pid: n for n, s in cluster.services.items() if n.startswith("airflow-worker")}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = task_process(ti_id)
        while pid and pid > 1:
            if pid in by_pid:
                return by_pid[pid]
            pid = _ppid(pid)
        time.sleep(0.5)
    raise DrillError(f"no worker process runs task instance {ti_id}")


# --------------------------------------------------------------------------- deployments
class Processes:
    """The deployment as processes (scripts/cluster.py): what a drill breaks and reads."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.api_url = cluster.api_url

    def airflow_env(self) -> dict[str, str]:
        return self.cluster.airflow_env()

    def kill(self, name: str) -> None:
        """SIGKILL a service's whole process tree, as its container's death would."""
        self.cluster.kill(name, signal.SIGKILL)

    def freeze(self, name: str) -> None:
        """SIGSTOP a service's whole process tree: nothing of it runs on until thawed."""
        self.cluster.kill(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        self.cluster.kill(name, signal.SIGCONT)

    def stop(self, name: str) -> None:
        self.cluster.stop(name)

    def start(self, name: str) -> None:
        self.cluster.start(name)

    def worker_of(self, ti: dict, timeout: float = 60) -> str:
        return worker_of(self.cluster, ti["id"], timeout)

    def log_mark(self, name: str) -> int:
        return Path(self.cluster.services[name].log).stat().st_size

    def log_since(self, name: str, mark: float) -> list[str]:
        with open(self.cluster.services[name].log, errors="replace") as f:
            f.seek(int(mark))
            return f.readlines()

    def workers_ready(self) -> bool:
        want = sum(n.startswith("airflow-worker-") for n in self.cluster.services)
        return len(celery_workers(self.cluster)) >= want


class Containers:
    """The deployment in containers (scripts/compose.py): a service's death is its
    container killed (`podman kill`), the Celery worker running a task the container whose
    hostname the task instance records."""

    def __init__(self, compose: Any):
        self.compose = compose
        self.api_url = compose.api_url

    def airflow_env(self) -> dict[str, str]:
        return self.compose.airflow_env()

    def kill(self, name: str) -> None:
        self.compose.kill(self.compose.container_of(name), signal.SIGKILL)

    def freeze(self, name: str) -> None:
        """`podman pause`: the container's cgroup frozen, nothing of it runs on."""
        self.compose.pause(self.compose.container_of(name))

    def thaw(self, name: str) -> None:
        self.compose.unpause(self.compose.container_of(name))

    def stop(self, name: str) -> None:
        self.compose.stop(self.compose.container_of(name))

    def start(self, name: str) -> None:
        self.compose.start(self.compose.container_of(name))

    def worker_of(self, ti: dict, timeout: float = 60) -> str:
        by_host = {c["hostname"]: n for n, c in self.compose.containers().items()
                   if c["service"] == "airflow-worker"}
        if ti.get("hostname") not in by_host:
            raise DrillError(f"no worker container has hostname {ti.get('hostname')!r}")
        return by_host[ti["hostname"]]

    def log_mark(self, name: str) -> float:
        return time.time()

    def log_since(self, name: str, mark: float) -> list[str]:
        return self.compose.log_lines(self.compose.container_of(name), since=mark)

    def workers_ready(self) -> bool:
        cs = self.compose.containers()
        workers = [n for n, c in cs.items() if c["service"] == "airflow-worker"]
        return bool(workers) and all(self.compose.healthy(n, cs[n]) for n in workers)


# --------------------------------------------------------------------------- drills
class Drills:
    """Daily epochs of flights_daily on a running deployment (:class:`Processes` or
    :class:`Containers`), one data day after another."""

    def __init__(self, deployment: Processes | Containers, minio_restarts: int = 1):
        self.deploy = deployment
        self.minio_restarts = minio_restarts
        env = deployment.airflow_env()
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            os.environ[k] = env[k]
        endpoint = env["AWS_ENDPOINT_URL"]
        self.coord = Coordinator(open_storage(env["CKPT_STORAGE"], endpoint_url=endpoint), DAG)
        self.data = open_storage(env["CKPT_DATA"], endpoint_url=endpoint)
        self.af = Airflow(deployment.api_url, env["AIRFLOW_ADMIN_PASSWORD"])
        self.next_logical = FIRST_DAY + timedelta(days=1)  # the run of data day 1
        self.triggered = 0  # runs triggered (one epoch each)
        self.published_until = FIRST_DAY  # logical date of the last successful run

    # -- helpers ---------------------------------------------------------------
    def ensure_landed(self, logical: date) -> None:
        """The data day a run of ``logical`` consumes (airflow-init landed days 1-7)."""
        day = logical - timedelta(days=1)
        if not self.data.exists(f"raw/flights/{day.isoformat()}.csv"):
            land(self.data, [day], dims=False, seed=day.toordinal())

    def trigger_next(self) -> tuple[str, date]:
        logical = self.next_logical
        self.ensure_landed(logical)
        run_id = self.af.trigger(logical)
        self.next_logical = logical + timedelta(days=1)
        self.triggered += 1
        return run_id, logical

    def finish(self, run_id: str, logical: date) -> str:
        state = self.af.wait_run(run_id)
        if state == "success":
            self.published_until = logical
        return state

    def clean_epoch(self) -> str:
        run_id, logical = self.trigger_next()
        state = self.finish(run_id, logical)
        if state != "success":
            raise DrillError(f"a clean epoch (logical date {logical}) ended {state}")
        return run_id

    def check(self) -> tuple[str, int, int]:
        """(verdict, rows lost, rows duplicated) of the published tables against the
        oracle over every day the successful runs consumed."""
        rows, _, _ = oracle.clean_flights(oracle.raw_files(self.data,
                                                           self.published_until.isoformat()))
        verdict = "ok"
        lost = dup = 0
        for keys, output in ((["carrier"], "gold_carrier_stats"),
                             (["origin", "dest"], "gold_route_stats")):
            want = oracle.stats(rows, keys)
            got = oracle.published(self.coord, output)
            got = got[keys + oracle.METRIC_COLS].sort_values(keys).reset_index(drop=True)
            if output == "gold_carrier_stats":  # rows = flights counted per carrier
                m = want.merge(got, on=keys, how="outer", suffixes=("_w", "_g")).fillna(0)
                diff = m["flights_g"] - m["flights_w"]
                lost, dup = int(-diff[diff < 0].sum()), int(diff[diff > 0].sum())
            try:
                pd.testing.assert_frame_equal(got, want, check_dtype=False, check_exact=False,
                                              rtol=1e-9)
            except AssertionError:
                verdict = f"mismatch:{output}"
        return verdict, lost, dup

    def epochs_of_run(self, run_id: str) -> list[int]:
        return [b.epoch_id for b in self.coord.barriers() if b.run_id == run_id]

    def completed_once(self, run_id: str) -> bool:
        done = [e for e in self.epochs_of_run(run_id)
                if (m := self.coord.metadata(e)) is not None and m.completed]
        published = [h for h in self.coord.catalog.manifest().history
                     if h["epoch_id"] in done]
        return len(done) == 1 and len(published) == 1

    def victim_running(self, run_id: str, after: float) -> dict:
        """The victim task once it has run ``after`` seconds (its Spark job under way)."""
        ti = self.af.wait_task(run_id, VICTIM_TASK)
        time.sleep(after)
        ti = self.af.task_instances(run_id)[VICTIM_TASK]
        if ti["state"] != "running":
            raise DrillError(f"{VICTIM_TASK} finished before the fault ({ti['state']}); "
                             "the drill needs a longer task")
        return ti

    def record(self, res: FaultResult, run_id: str, state: str, what: str,
               must_succeed: bool = True) -> None:
        verdict, lost, dup = self.check()
        if must_succeed and state != "success" and verdict == "ok":
            verdict = "run_not_successful"
        tis = self.af.task_instances(run_id)
        tries = {t: ti["try_number"] for t, ti in tis.items() if ti["try_number"] > 1}
        res.add(f"{what}->{state}:{verdict}", lost, dup)
        res.notes.append(f"run {run_id}: tries>1 {tries or 'none'}")
        for task, ti in tis.items():
            for k in range(1, ti["try_number"]):  # why an earlier try ended, if it failed
                error = self.af.error_of(run_id, task, k)
                if not error.startswith(("no exception", "(log:")):  # e.g. a cleared try
                    res.notes.append(f"{task} try {k}: {error}")
            if ti["state"] in ("failed", "up_for_retry"):
                res.notes.append(f"{task} try {ti['try_number']} {ti['state']}: "
                                 f"{self.af.error_of(run_id, task, ti['try_number'])}")

    # -- the drills --------------------------------------------------------------
    def kill_worker_mid_task(self, delays: tuple[float, ...] = (4, 2, 1),
                             notes: list[str] | None = None) -> VictimKill:
        """Trigger the next run and SIGKILL the worker running its victim task ``delays[0]``
        seconds into it. A task that ends first leaves a clean epoch, and the next run's
        task is killed sooner (the next delay); ``notes`` gets a line per such run."""
        for after in delays:
            run_id, logical = self.trigger_next()
            killed = self._kill_if_running(run_id, after)
            if killed is not None:
                return VictimKill(run_id, logical, *killed, after)
            state = self.finish(run_id, logical)
            if notes is not None:
                notes.append(f"{VICTIM_TASK} of {run_id} ended within {after} s; the run "
                             f"ended {state}, the next run is killed sooner")
            if state != "success":
                raise DrillError(f"a run whose {VICTIM_TASK} was not killed ended {state}")
        raise DrillError(f"{VICTIM_TASK} ended within {delays[-1]:g} s in {len(delays)} "
                         "runs: no task to kill")

    def _kill_if_running(self, run_id: str, after: float) -> tuple[dict, str] | None:
        """(the victim task instance as killed, its worker) ``after`` seconds into the task,
        or None when the task had ended first.

        The worker is frozen before its task's state is read, so the task cannot end between
        that read and the kill (a warm 9 s task once ended in that gap, and the drill then
        waited for a retry that never came)."""
        ti = self.af.wait_task(run_id, VICTIM_TASK)
        victim = self.deploy.worker_of(ti)  # while its task process is sure to exist
        time.sleep(after)
        self.deploy.freeze(victim)
        ti = self.af.task_instances(run_id)[VICTIM_TASK]
        if ti["state"] != "running":
            self.deploy.thaw(victim)
            return None
        self.deploy.kill(victim)
        return ti, victim

    def worker_kill(self) -> FaultResult:
        """SIGKILL the Celery worker (its whole process group, as a container dies) running
        a Spark task mid-job: the task is retried on the other worker and restores."""
        res = FaultResult("worker_kill")
        k = self.kill_worker_mid_task(notes=res.notes)
        run_id, logical, ti, victim = k.run_id, k.logical, k.ti, k.worker
        t_kill = time.monotonic()
        retry = self.af.wait_task(run_id, VICTIM_TASK, ("running", "success"),
                                  min_try=ti["try_number"] + 1, timeout=900)
        res.notes.append(f"SIGKILL {victim} running {VICTIM_TASK} try {ti['try_number']} "
                         f"{k.after:g} s in; try {retry['try_number']} {retry['state']} "
                         f"{time.monotonic() - t_kill:.0f} s later")
        other = self.deploy.worker_of(retry, 30) if retry["state"] == "running" \
            else "finished before seen"
        state = self.finish(run_id, logical)
        handle = self._handle(run_id, VICTIM_TASK)
        self.deploy.start(victim)  # the deployment gets its worker back
        self._wait_workers()
        # a write of the killed try resumed on the Connect server (PROTOCOL 5.17)
        resumed = (handle.metrics.get("resumed") or {}).get("actions") if handle else None
        what = (f"killed:{victim}->retried_on:{other}:try{retry['try_number']}:"
                f"restored_from={handle.restored_from if handle else None}:resumed={resumed}")
        self.record(res, run_id, state, what)
        return res

    def scheduler_kill(self) -> FaultResult:
        """SIGKILL the scheduler mid-run, start it again: the run continues (the new
        scheduler adopts the running tasks) and its epoch completes once."""
        res = FaultResult("scheduler_kill")
        run_id, logical = self.trigger_next()
        self.victim_running(run_id, after=3)
        self.deploy.kill("airflow-scheduler")
        time.sleep(10)
        self.deploy.start("airflow-scheduler")
        state = self.finish(run_id, logical)
        self.record(res, run_id, state,
                    f"scheduler_killed->restarted:completed_once={self.completed_once(run_id)}")
        return res

    def minio_restart(self) -> FaultResult:
        """Restart MinIO mid-epoch, ``minio_restarts`` times (each later one at another
        point of the epoch, MINIO_STOP_AFTER): each epoch completes or aborts cleanly; the
        next run recovers."""
        res = FaultResult("minio_restart")
        for i in range(self.minio_restarts):
            after = MINIO_STOP_AFTER[i % len(MINIO_STOP_AFTER)]
            run_id, logical = self.trigger_next()
            try:
                self.victim_running(run_id, after=after)
            except DrillError as exc:  # the task was quicker: this restart is not made
                res.notes.append(f"no restart {after:g} s in: {exc}")
                self.finish(run_id, logical)
                continue
            self.deploy.stop("minio")
            time.sleep(10)
            self.deploy.start("minio")
            res.notes.append(f"MinIO stopped {after:g} s into {VICTIM_TASK}, started 10 s later")
            state = self.finish(run_id, logical)
            epochs = self.epochs_of_run(run_id)
            decided = [("completed" if m.completed else f"aborted:{m.status}")
                       if (m := self.coord.metadata(e)) else "pending" for e in epochs]
            nxt = self.clean_epoch()
            # Either outcome is clean: completed, or aborted and the next run recovered.
            self.record(res, run_id, state, f"minio_restarted->epochs:{'+'.join(decided)}"
                        f"->next_run:{self.af.state(nxt)}", must_succeed=False)
        return res

    def spark_worker_kill(self) -> FaultResult:
        """SIGKILL the Spark worker (and its executor) mid-job, start it again: Spark
        reruns the lost tasks on the new executor, or the task retry restores."""
        res = FaultResult("spark_worker_kill")
        run_id, logical = self.trigger_next()
        self.victim_running(run_id, after=4)
        mark = self.deploy.log_mark("spark-master")
        self.deploy.kill("spark-worker")
        time.sleep(5)
        self.deploy.start("spark-worker")
        state = self.finish(run_id, logical)
        lines = self.deploy.log_since("spark-master", mark)
        lost = sum("Telling app of lost executor" in line for line in lines)
        new = sum("Launching executor" in line for line in lines)
        res.notes.append(f"Spark master after the kill: {lost} executor(s) lost, {new} launched "
                         "on the restarted worker")
        self.record(res, run_id, state, "spark_worker_killed->restarted")
        return res

    def backfill_from_savepoint(self) -> FaultResult:
        """A savepoint of the epoch two behind main, a backfill from it to one day past
        main's frontier: published outputs stay main's until the backfill's last epoch,
        then switch once."""
        res = FaultResult("backfill_from_savepoint")
        c = self.coord
        latest = c.latest_completed()
        main_epochs = [b.epoch_id for b in c.barriers("main")
                       if (m := c.metadata(b.epoch_id)) is not None and m.completed]
        origin = main_epochs[-3] if len(main_epochs) >= 3 else main_epochs[0]
        sp = create_savepoint(c, f"drill-sp-{origin}", origin)
        first = (date.fromisoformat(c.barrier(origin).data_interval["end"][:10]))
        last = self.next_logical - timedelta(days=1)  # one data day past main's frontier
        self.ensure_landed(last + timedelta(days=1))
        body = {"from_savepoint": sp.name, "first_day": first.isoformat(),
                "last_day": last.isoformat()}
        r = self.af.call("POST", f"{CKPT_API}/backfills", json=body)
        if r.status_code != 201:
            raise DrillError(f"backfill refused: {r.status_code} {r.text[:300]}")
        bf = r.json()
        before = c.catalog.manifest().epoch_id
        seen: list[tuple[int, str]] = []  # published epoch ids while the backfill runs
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            pub = c.catalog.manifest()
            if not seen or seen[-1] != (pub.epoch_id, pub.lineage):
                seen.append((pub.epoch_id, pub.lineage))
            b = self.af.call("GET", f"/api/v2/backfills/{bf['backfill_id']}").json()
            if b.get("completed_at"):
                break
            time.sleep(2)
        else:
            raise DrillError("backfill not completed in 1800 s")
        runs = self.af.call("GET", f"/api/v2/dags/{DAG}/dagRuns",
                            params={"run_type": "backfill"}).json()["dag_runs"]
        theirs = c.barriers(bf["lineage"])
        states = sorted(r["state"] for r in runs
                        if r["dag_run_id"] in {b.run_id for b in theirs})
        ours = [b.epoch_id for b in theirs]
        pub = c.catalog.manifest()
        m_seen = [s for s in seen if s[1] == bf["lineage"]]
        switched_once = (seen[0] == (before, "main") and m_seen == [(ours[-1], bf["lineage"])]
                         and seen[-1] == m_seen[-1] and pub.epoch_id == ours[-1])
        if all(s == "success" for s in states) and states:
            self.published_until = last + timedelta(days=1)
            self.next_logical = last + timedelta(days=2)
        res.notes.append(f"backfill {bf['backfill_id']} days {first}..{last} from savepoint "
                         f"{sp.name} (epoch {origin}); main was at epoch {latest}; "
                         f"published seen: {seen}")
        state = "success" if states and set(states) == {"success"} else "+".join(states)
        self.record(res, runs[0]["dag_run_id"] if runs else "-", state or "none",
                    f"backfill:{len(ours)}_epochs:switched_once_at_end={switched_once}")
        return res

    # -- internals -----------------------------------------------------------
    def _handle(self, run_id: str, task_id: str):
        for e in self.epochs_of_run(run_id):
            m = self.coord.metadata(e)
            if m is not None and m.completed:
                return self.coord.completed_handles(e).get(task_id)
        return None

    def _wait_workers(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.deploy.workers_ready():
                return
            time.sleep(2)
        raise DrillError(f"Celery workers not back in {timeout:g}s")


#: Verdicts that break a guarantee (the drill's command then exits 1).
BROKEN = ("mismatch", "DRILL_ERROR", "run_not_successful", "=False", "pending")

DRILLS = ("worker_kill", "scheduler_kill", "minio_restart", "spark_worker_kill",
          "backfill_from_savepoint")


def run_drills(names: list[str], home: Path, containers: bool = False,
               minio_restarts: int = 1) -> tuple[list[FaultResult], list, float]:
    """Bring the deployment up (as processes, or in containers), run a clean first epoch and
    the drills, bring it down; (results, what was left behind, seconds to bring it up)."""
    t0 = time.monotonic()
    if containers:
        from scripts.compose import Compose

        compose = Compose(local=True, airflow_env=DRILL_ENV)
        compose.down()  # a previous run's leftovers
        compose.up()
        deployment: Processes | Containers = Containers(compose)
    else:
        deployment = Processes(up(home, free_ports=True, extra_env=DRILL_ENV))
    up_s = time.monotonic() - t0
    results = []
    try:
        d = Drills(deployment, minio_restarts)
        d.clean_epoch()
        for name in names:
            t = time.monotonic()
            try:
                res = getattr(d, name)()
            except Exception as exc:  # noqa: BLE001 - the table records it and goes on
                traceback.print_exc()
                res = FaultResult(name)
                res.add(f"DRILL_ERROR:{type(exc).__name__}", 0, 0)
                res.notes.append(f"{type(exc).__name__}: {str(exc)[:300]}")
            res.seconds = time.monotonic() - t
            results.append(res)
            print(f"{res.fault:24} runs={res.runs} lost={res.rows_lost} "
                  f"dup={res.rows_duplicated} {res.seconds:5.0f}s {dict(res.outcomes)}",
                  flush=True)
    finally:
        left = compose.down() if containers else down(home, volumes=True)
    return results, left, up_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="drills", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", choices=DRILLS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--home", type=Path, help="cluster home (default: a temporary directory)")
    ap.add_argument("--containers", action="store_true",
                    help="against the compose deployment in containers (podman or docker; "
                    "images from scripts/container_images.sh), results in drills-containers.json")
    ap.add_argument("--minio-restarts", type=int, default=1, metavar="N",
                    help="restarts of MinIO in the minio_restart drill, each at another point "
                    "of the epoch (default 1)")
    a = ap.parse_args(argv)
    home = a.home or Path(tempfile.mkdtemp(prefix="ckpt-drills-"))
    if a.containers and a.out == RESULTS:
        a.out = RESULTS.with_name("drills-containers.json")
    t0 = time.monotonic()
    results, left, up_s = run_drills(list(a.only or DRILLS), home, a.containers,
                                     a.minio_restarts)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps([r.to_json() for r in results], indent=2) + "\n")
    meta = {"drill_env": DRILL_ENV, "cluster_up_seconds": round(up_s, 1),
            "left_behind_after_down": left, "seconds": round(time.monotonic() - t0, 1)}
    a.out.with_name(a.out.stem + "_run.json").write_text(json.dumps(meta, indent=2) + "\n")
    bad = [r.fault for r in results if r.rows_lost or r.rows_duplicated or any(
        b in o for o in r.outcomes for b in BROKEN)]
    print(f"{len(results)} drills in {meta['seconds']:.0f} s (cluster up in {up_s:.0f} s); "
          f"written to {a.out}; left behind after down: {left or 'nothing'}")
    if bad or left:
        print(f"drills FAILED: {', '.join(bad) or 'left behind after down'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
