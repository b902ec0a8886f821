"""tpch_daily on the deployment topology: ``scripts/cluster.sh up``'s
processes (PostgreSQL, Redis, MinIO, Spark standalone master + worker, the Connect server on
that master, Airflow under CeleryExecutor with two workers), TPC-H landed into the
deployment's MinIO at scale factor ``--scale``, runs triggered through the REST API: the
history, then daily runs, one of them (a deletion day) with the Celery worker running its
``ingest`` SIGKILLed mid-task (its whole process group, as a container dies). The published
tables are then checked against DuckDB over tpchgen-cli's own files.

    python bench/tpch_topology.py --scale 1 --days 3

Results in bench/results/tpch_topology.json (keys in bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.drills import DRILL_ENV, Airflow, DrillError, worker_of  # noqa: E402
from checkpointing import Coordinator, open_storage  # noqa: E402
from checkpointing.protocol.attempts import scan_task  # noqa: E402
from scripts.cluster import celery_workers, down, up  # noqa: E402
from spark_jobs.tpch.landing import DEFAULT_CACHE, LAST_ORDER_DAY, generate, land  # noqa: E402

DAG = "tpch_daily"
RESULTS = ROOT / "bench" / "results" / "tpch_topology.json"
VICTIM = "ingest"
#: The drills' settings (a lost task noticed after 60 s), tpch_daily's retry after 30 s.
ENV = {**DRILL_ENV, "TPCH_RETRIES": "2"}


def run_day(af: Airflow, logical: date, kill: Any = None) -> dict[str, Any]:
    """Trigger the run of ``logical`` (it consumes the data before that day), optionally
    calling ``kill(run_id)`` while it runs; wait for it."""
    t0 = time.monotonic()
    run_id = af.trigger(logical)
    fault = kill(run_id) if kill else None
    state = af.wait_run(run_id, timeout=3600)
    tis = af.task_instances(run_id)
    return {"logical_date": logical.isoformat(), "run_id": run_id, "state": state,
            "seconds": round(time.monotonic() - t0, 1), "fault": fault,
            "tries": {t: ti["try_number"] for t, ti in tis.items()},
            "task_seconds": {t: ti.get("duration") for t, ti in tis.items()}}


def task_log(home: Path, run_id: str, task_id: str, try_number: int) -> Path:
    """The task's log file as the Celery worker writes it (AIRFLOW_HOME is the cluster
    home's ``airflow``)."""
    return (home / "airflow" / "logs" / f"dag_id={DAG}" / f"run_id={run_id}" /
            f"task_id={task_id}" / f"attempt={try_number}.log")


def worker_killer(cluster: Any, af: Airflow, coord: Coordinator, home: Path,
                  after: float) -> Any:
    """A ``kill(run_id)`` that SIGKILLs the Celery worker running ``ingest`` ``after``
    seconds after the task logged its restore (the runtime's "task ingest attempt N of
    epoch E restored ..." line, just before the Spark work; a first attempt writes no start
    object to poll), then starts that worker again. Whether the attempt had acknowledged
    before the kill is recorded: the drill means something only when it had not."""
    def epoch_of(run_id: str, timeout: float = 600) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [b.epoch_id for b in coord.barriers() if b.run_id == run_id]
            if found:
                return found[-1]
            time.sleep(0.2)
        raise DrillError(f"no epoch for run {run_id} in {timeout:g}s")

    def kill(run_id: str) -> dict[str, Any]:
        epoch = epoch_of(run_id)
        ti = af.wait_task(run_id, VICTIM, timeout=1800)
        deadline = time.monotonic() + 600
        line = f"task {VICTIM} attempt {ti['try_number']} of epoch {epoch}"
        path = task_log(home, run_id, VICTIM, ti["try_number"])
        while True:
            if path.exists() and line in path.read_text(errors="replace"):
                break
            if time.monotonic() > deadline:
                raise DrillError(f"{VICTIM} try {ti['try_number']} never logged its restore")
            time.sleep(0.1)
        time.sleep(after)
        victim = worker_of(cluster, ti["id"])
        cluster.kill(victim, signal.SIGKILL)
        t_kill = time.monotonic()
        acked = ti["try_number"] in scan_task(coord.storage, coord.layout, epoch,
                                              VICTIM).acks
        retry = af.wait_task(run_id, VICTIM, ("running", "success"),
                             min_try=ti["try_number"] + 1, timeout=1200)
        noticed = time.monotonic() - t_kill
        cluster.start(victim)
        deadline = time.monotonic() + 120
        while len(celery_workers(cluster)) < 2 and time.monotonic() < deadline:
            time.sleep(2)
        return {"killed": victim, "epoch": epoch, "try": ti["try_number"],
                "after_start_s": after, "acked_before_kill": acked,
                "retry_started_s": round(noticed, 1), "retry_seen": retry["state"]}
    return kill


def main(argv: list[str] | None = None) -> int:
    from bench.harness.tpch_oracle import check_published as check

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--days", type=int, default=3, help="daily runs after the history")
    ap.add_argument("--kill-day", type=int, default=2, help="which daily run loses a worker")
    ap.add_argument("--kill-after", type=float, default=0.3,
                    help="seconds after the ingest's restore that its worker dies")
    ap.add_argument("--deletes", type=int, default=100)
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)

    history_until = LAST_ORDER_DAY - timedelta(days=a.days + 2)
    generated = generate(a.scale, a.cache)
    home = a.home or Path(tempfile.mkdtemp(prefix="tpch-topology-")) / "cluster"
    t0 = time.monotonic()
    cluster = up(home, free_ports=True, extra_env=ENV, log=lambda *x, **k: None)
    up_s = time.monotonic() - t0
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {"scale": a.scale, "history_until": str(history_until),
                              "up_seconds": round(up_s, 1), "runs": runs, "env": ENV}
    try:
        env = cluster.airflow_env()
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            os.environ[k] = env[k]
        endpoint = env["AWS_ENDPOINT_URL"]
        data = open_storage(env["CKPT_DATA"], endpoint_url=endpoint)
        t0 = time.monotonic()
        # Deletions every second day: the killed run (day 2) is a deletion day.
        landed = land(data, a.scale, history_until, a.days, delete_every=2,
                      deletes=a.deletes, cache=a.cache)
        result["landing_seconds"] = round(time.monotonic() - t0, 1)
        af = Airflow(cluster.api_url, env["AIRFLOW_ADMIN_PASSWORD"], dag=DAG)
        coord = Coordinator(open_storage(env["CKPT_STORAGE"], endpoint_url=endpoint), DAG)
        killer = worker_killer(cluster, af, coord, home, a.kill_after)
        for i in range(a.days + 1):  # run 0 consumes the history
            logical = history_until + timedelta(days=i)
            runs.append(run_day(af, logical, killer if i == a.kill_day else None))
            print(json.dumps(runs[-1]), flush=True)
            if runs[-1]["state"] != "success":
                raise DrillError(f"run of {logical} ended {runs[-1]['state']}")
        until = (history_until + timedelta(days=a.days)).isoformat()
        deleted = sorted(k for d, ks in landed.deletes.items() if d < until for k in ks)
        check(coord, generated, until, deleted)  # raises on any difference
        killed = runs[a.kill_day]
        handle = coord.completed_handles(killed["fault"]["epoch"])[VICTIM]
        result.update({
            "tpch_topology_equal_duckdb": True, "deleted_orders": len(deleted),
            "tpch_topology_history_run_seconds": runs[0]["seconds"],
            "tpch_topology_daily_run_seconds": [r["seconds"] for r in runs[1:]],
            "tpch_topology_killed_run_seconds": killed["seconds"],
            "killed_ingest_tries": killed["tries"][VICTIM],
            # the attempt whose acknowledgement the epoch completed with, and where it
            # restored from: a retry that redid the work restores from the last epoch
            "killed_ingest_acked_attempt": handle.attempt,
            "killed_ingest_restored_from": handle.restored_from,
            "killed_before_ack": not killed["fault"]["acked_before_kill"],
            "epochs_completed": coord.latest_completed()})
    except Exception as exc:  # noqa: BLE001 - recorded, then the cluster comes down
        result["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        raise
    finally:
        result["left_behind"] = down(home, volumes=True, log=lambda *x, **k: None)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return 0 if result.get("tpch_topology_equal_duckdb") and result.get(
        "killed_before_ack") else 1


if __name__ == "__main__":
    sys.exit(main())
