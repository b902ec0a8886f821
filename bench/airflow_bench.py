"""One daily epoch of flights_daily under a real scheduler, per Spark mode.

For each mode (``local``: every task starts a Spark of its own; ``connect``: every task is
a client of one Spark Connect server), an `airflow standalone` (LocalExecutor on
PostgreSQL when ``CKPT_TEST_PG_URL`` is set, else SQLite) runs one warm-up day and then
``--epochs`` days one after the other. Each day runs three times: first flights_daily with
checkpointing disabled (the run conf's switch: the same jobs on the same server, restoring
the same epoch, without the protocol; ``airflow_unchecked_seconds_<mode>``,
``airflow_checkpoint_overhead_ratio_<mode>`` = checkpointed / unchecked), then
flights_daily, then the **floor**: a DAG of the same shape (task ids and dependencies)
whose tasks do nothing (``airflow_floor_seconds_<mode>``, ``airflow_over_floor_ratio_<mode>``
= flights_daily / floor), and the **jobs' floor**: the same without the steps the provider
adds (``checkpoint_*``), the DAG as its user wrote it, tasks that do nothing
(``airflow_jobs_floor_seconds_<mode>``, ``airflow_over_jobs_floor_ratio_<mode>``). In
connect mode it also counts each task's Spark jobs and actions on the server's UI
(``spark_actions_per_epoch_connect``) and times a retry that resumes a killed Spark action
(bench/reattach_bench.py: ``reattach_recovery_ratio``).
Reported per mode: the median seconds from a run's start to its end (Airflow's own
timestamps), how long after its commit step the run ends (``airflow_run_end_lag_seconds``:
the epoch watchdog noticing the decision), the median duration of each task, and where a
checkpointed task's time goes (the epoch statistics' restore and run times; the rest of a
task's duration is process start, Spark session and acknowledging).

    python bench/airflow_bench.py [--epochs 3] [--modes local,connect] [--no-preload]
    python bench/airflow_bench.py --observability [--epochs 3] [--rounds 2]

``--observability`` measures only ``metrics_overhead_ratio``: the same epochs with StatsD
metrics and OpenLineage events sent to receivers on this host / with both off
(:func:`bench_observability`).

The scheduler starts LocalExecutor's workers from a forkserver that preloads what a task
imports (:mod:`dag_checkpoints.task.preload`, the recommended deployment); ``--no-preload`` is
the control, every task process importing its modules itself.

Merges its keys into bench/results/latest.json (``details.airflow`` holds the raw figures)
and appends them to history.jsonl; ``make bench`` runs it after pipeline_bench.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness.airflow_standalone import Standalone, connect_env, free_port  # noqa: E402
from bench.reattach_bench import measure as measure_reattach  # noqa: E402
from bench.spark_actions import jobs_by_tag, per_task  # noqa: E402
from checkpointing import Coordinator, LocalStorage  # noqa: E402
from checkpointing.views.stats import epoch_stats  # noqa: E402
from spark_jobs.flights.landing import land  # noqa: E402
from spark_jobs.runtime.connect_server import ConnectServer  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DAG = "flights_daily"
START = date(2013, 1, 1)


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


FLOOR_DAG = f"floor_{DAG}"
JOBS_FLOOR_DAG = f"jobs_floor_{DAG}"
#: The floor: a DAG of flights_daily's shape (its task ids and dependencies, read from the
#: REST API of the same standalone) whose tasks do nothing but run: what Airflow alone costs.
FLOOR_SOURCE = """\
from datetime import datetime

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

SHAPE = {shape!r}

with DAG("{dag_id}", schedule=None, start_date=datetime(2013, 1, 1), catchup=False):
    ops = {{t: PythonOperator(task_id=t, python_callable=lambda: None) for t in SHAPE}}
    for task, downstream in SHAPE.items():
        for d in downstream:
            ops[task] >> ops[d]
"""


def run_day(sa: Standalone, n: int, dag: str = DAG, checkpointing: bool = True
            ) -> dict[str, Any]:
    """Trigger the run of ``dag`` that processes day ``n`` (1-based) and wait for it; with
    ``checkpointing`` off, the run conf's switch (its logical date a second later: the same
    data interval, another run)."""
    logical = (START + timedelta(days=n)).isoformat() + \
        ("T00:00:00Z" if checkpointing else "T00:00:01Z")
    run = sa.trigger(dag, logical, None if checkpointing else
                     {"checkpoint": {"enabled": False}})
    state = sa.wait_run(dag, run, timeout=1800)
    if state != "success":
        raise RuntimeError(f"run {run} ended {state}: {sa.tail()}")
    r = sa.get(f"/api/v2/dags/{dag}/dagRuns/{run}").json()
    tis = sa.get(f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances").json()["task_instances"]
    commit = next((t for t in tis if t["task_id"] == "checkpoint_commit"), None)
    start, end = _ts(r["start_date"]), _ts(r["end_date"])
    timeline = {t["task_id"]: [round(_ts(t["start_date"]) - start, 2),
                               round(_ts(t["end_date"]) - start, 2)]
                for t in tis if t.get("start_date") and t.get("end_date")}
    jobs_end = max((e for t, (_, e) in timeline.items() if not t.startswith("checkpoint_")),
                   default=None)
    return {"run_id": run, "seconds": round(end - start, 2),
            # what the run waits for after its epoch is decided (the watchdog's lag)
            "end_lag_seconds": round(end - _ts(commit["end_date"]), 2)
            if commit and commit.get("end_date") else None,
            # what the run waits for after its last job ended (the provider's tail)
            "tail_seconds": round(end - start - jobs_end, 2) if jobs_end is not None
            else None,
            "timeline": timeline,
            "tasks": {t["task_id"]: round(t["duration"] or 0.0, 2) for t in tis}}


def dags_folder(work: Path) -> Path:
    """A DAG folder holding the repository's DAG files (links) and, once written, the
    floor DAG."""
    folder = work / "dags"
    folder.mkdir()
    for f in (ROOT / "dags").glob("*.py"):
        (folder / f.name).symlink_to(f)
    return folder


def add_floor(sa: Standalone, folder: Path, timeout: float = 120) -> dict[str, list[str]]:
    """Write the floor DAGs: flights_daily's shape, and its jobs' shape without the
    provider's steps; wait until Airflow knows them."""
    tasks = sa.get(f"/api/v2/dags/{DAG}/tasks").json()["tasks"]
    shape = {t["task_id"]: sorted(t["downstream_task_ids"]) for t in tasks}
    jobs = {t: [d for d in ds if not d.startswith("checkpoint_")]
            for t, ds in shape.items() if not t.startswith("checkpoint_")}
    for dag_id, dag_shape in ((FLOOR_DAG, shape), (JOBS_FLOOR_DAG, jobs)):
        (folder / f"{dag_id}.py").write_text(FLOOR_SOURCE.format(shape=dag_shape,
                                                                 dag_id=dag_id))
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(sa.get(f"/api/v2/dags/{d}").status_code == 200
               for d in (FLOOR_DAG, JOBS_FLOOR_DAG)):
            return shape
        time.sleep(1)
    raise RuntimeError(f"floor DAGs not parsed in {timeout:g}s: {sa.tail()}")


def task_split(coord: Coordinator, epochs: list[int]) -> dict[str, dict[str, float]]:
    """Median milliseconds per task over ``epochs``: restore and run (epoch statistics;
    run includes the snapshot's writes), and what the task spent before its job (the
    handle's ``task_overhead_ms``: process age at the job's start, opening the session)."""
    acc: dict[str, dict[str, list[float]]] = {}
    for e in epochs:
        handles = coord.completed_handles(e)
        for t in epoch_stats(coord, e).tasks:
            d = acc.setdefault(t.task_id, {})
            for k in ("restore_ms", "run_ms"):
                if getattr(t, k, None) is not None:
                    d.setdefault(k, []).append(getattr(t, k))
            h = handles.get(t.task_id)
            for k, v in ((h.metrics.get("task_overhead_ms") or {}) if h else {}).items():
                d.setdefault(k, []).append(v)
    return {task: {k: round(statistics.median(v), 1) for k, v in d.items() if v}
            for task, d in acc.items()}


def fixed_overhead_seconds(runs: list[dict[str, Any]], split: dict[str, dict[str, float]]
                           ) -> float | None:
    """Median over checkpointed tasks and runs of (Airflow's duration - the task's median
    run time): what a task costs besides its Spark work (process, imports, session, restore,
    acknowledgement)."""
    gaps = [r["tasks"][t] - s["run_ms"] / 1000 for r in runs for t, s in split.items()
            if "run_ms" in s and t in r["tasks"]]
    return round(statistics.median(gaps), 2) if gaps else None


def bench_mode(mode: str, epochs: int, work: Path, preload: bool = True) -> dict[str, Any]:
    import os

    data = work / "data"
    land(LocalStorage(data), [START + timedelta(days=i) for i in range(epochs + 1)], seed=1)
    env: dict[str, Any] = {"CKPT_STORAGE": f"file://{work}/ckpt", "CKPT_DATA": f"file://{data}",
           "FLIGHTS_RETRIES": "0", "AIRFLOW__CORE__PARALLELISM": "4",
           "FLIGHTS_RETAINED_EPOCHS": str(epochs + 2)}  # every measured epoch stays readable
    if os.environ.get("CKPT_TEST_PG_URL"):
        from bench.harness.pg import fresh_database

        env.update({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
                    fresh_database(f"ckpt_bench_{mode}"),
                    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor"})
    server, ui = None, free_port()
    if mode == "connect":
        server = ConnectServer(port=free_port(), log_path=work / "connect.log",
                               conf={"spark.ui.port": str(ui)}).start()
        env.update(connect_env(server))
    else:
        env["CKPT_SPARK_MODE"] = "local"
    folder = dags_folder(work)
    sa = Standalone(work / "airflow", preload=preload, AIRFLOW__CORE__DAGS_FOLDER=str(folder),
                    **env)
    floor: list[dict[str, Any]] = []
    jobs_floor: list[dict[str, Any]] = []
    unchecked: list[dict[str, Any]] = []
    try:
        sa.start()
        add_floor(sa, folder)
        warm = run_day(sa, 1)  # JIT, imports, the server's first session: not measured
        run_day(sa, 1, FLOOR_DAG)
        run_day(sa, 1, JOBS_FLOOR_DAG)
        runs = []
        for n in range(2, epochs + 2):  # interleaved: the same load on the same machine
            # Day n without checkpointing first: it restores the same epoch (n - 1) as the
            # checkpointed run after it, so both do the same Spark work.
            unchecked.append(run_day(sa, n, checkpointing=False))
            runs.append(run_day(sa, n))
            floor.append(run_day(sa, n, FLOOR_DAG))
            jobs_floor.append(run_day(sa, n, JOBS_FLOOR_DAG))
        sa.stop()
        actions = reattach = None
        if server is not None:
            # Spark jobs and actions per task, from the server's UI (every attempt's
            # actions carry the runtime's job tag), then a killed action resumed.
            actions = per_task(jobs_by_tag(f"http://127.0.0.1:{ui}"), DAG)
            (work / "reattach").mkdir()
            reattach = measure_reattach(server.url, work / "reattach")
    finally:
        sa.stop()
        if server is not None:
            server.stop()
    coord = Coordinator(LocalStorage(work / "ckpt"), DAG)
    tasks = sorted({t for r in runs for t in r["tasks"]})
    return {"epoch_seconds": statistics.median(r["seconds"] for r in runs),
            "floor_seconds": statistics.median(r["seconds"] for r in floor),
            "floor_seconds_all": [r["seconds"] for r in floor],
            "jobs_floor_seconds": statistics.median(r["seconds"] for r in jobs_floor),
            "jobs_floor_seconds_all": [r["seconds"] for r in jobs_floor],
            "unchecked_seconds": statistics.median(r["seconds"] for r in unchecked),
            "unchecked_seconds_all": [r["seconds"] for r in unchecked],
            "unchecked_task_seconds": {t: statistics.median(r["tasks"].get(t, 0.0)
                                                            for r in unchecked) for t in tasks},
            "floor_task_seconds": {t: statistics.median(r["tasks"].get(t, 0.0)
                                                        for r in floor) for t in tasks},
            "epoch_seconds_all": [r["seconds"] for r in runs],
            "warmup_seconds": warm["seconds"],
            "end_lag_seconds": statistics.median(r["end_lag_seconds"] for r in runs),
            "end_lag_seconds_all": [r["end_lag_seconds"] for r in runs],
            "tail_seconds": statistics.median(r["tail_seconds"] for r in runs),
            "tail_seconds_all": [r["tail_seconds"] for r in runs],
            "unchecked_tail_seconds": statistics.median(r["tail_seconds"] for r in unchecked),
            "floor_tail_seconds": statistics.median(r["tail_seconds"] for r in floor),
            # each task's median [start, end], seconds from the run's start
            "timeline": {t: [statistics.median(r["timeline"][t][i] for r in runs
                                               if t in r["timeline"]) for i in (0, 1)]
                         for t in tasks if any(t in r["timeline"] for r in runs)},
            "task_seconds": {t: statistics.median(r["tasks"].get(t, 0.0) for r in runs)
                             for t in tasks},
            "task_split_ms": (split := task_split(coord, list(range(2, epochs + 2)))),
            "task_fixed_overhead_seconds": fixed_overhead_seconds(runs, split),
            "spark_actions_per_task": actions, "reattach": reattach}


def bench_observability(epochs: int, rounds: int, work: Path) -> dict[str, Any]:
    """``metrics_overhead_ratio``: flights_daily's daily epochs with StatsD metrics and
    OpenLineage events on (a StatsD listener and an HTTP lineage receiver on this host) /
    off (Airflow's defaults). Airflow reads its metrics and lineage settings per process, so
    each setting is its own `airflow standalone` on one Spark Connect server, ``rounds``
    times in alternation (off, on, off, on, ...), each a warm-up day and then ``epochs``
    days on fresh storage; the ratio is of the medians of all measured epochs. A run with
    observability on that received no metric or no lineage event is refused."""
    import json
    import os

    from bench.harness.sinks import WebhookSink
    from bench.harness.statsd_sink import StatsdSink

    server = ConnectServer(port=free_port(), log_path=work / "connect.log").start()
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    received: dict[str, int] = {"metrics": 0, "lineage_events": 0}
    try:
        for r in range(rounds):
            for setting in ("off", "on"):
                home = work / f"{setting}-{r}"
                data = home / "data"
                land(LocalStorage(data), [START + timedelta(days=i)
                                          for i in range(epochs + 1)], seed=1)
                env: dict[str, Any] = {"CKPT_STORAGE": f"file://{home}/ckpt", "CKPT_DATA": f"file://{data}",
                       "FLIGHTS_RETRIES": "0", "AIRFLOW__CORE__PARALLELISM": "4",
                       **connect_env(server)}
                if os.environ.get("CKPT_TEST_PG_URL"):
                    from bench.harness.pg import fresh_database

                    env.update({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
                                fresh_database(f"ckpt_obs_{setting}_{r}"),
                                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor"})
                statsd = hook = None
                if setting == "on":
                    statsd, hook = StatsdSink(), WebhookSink()
                    env.update({
                        "AIRFLOW__METRICS__STATSD_ON": "True",
                        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
                        "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
                        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                            {"type": "http", "url": hook.url, "endpoint": "api/v1/lineage"}),
                        "AIRFLOW__OPENLINEAGE__NAMESPACE": "bench"})
                sa = Standalone(home / "airflow", AIRFLOW__CORE__DAGS_FOLDER=str(
                    dags_folder(home)), **env)
                try:
                    sa.start()
                    run_day(sa, 1)  # warm-up: not measured
                    seconds[setting] += [run_day(sa, n)["seconds"]
                                         for n in range(2, epochs + 2)]
                finally:
                    sa.stop()
                    if statsd is not None and hook is not None:
                        got = len(statsd.metrics("airflow.dag_checkpoints."))
                        events = len(hook.received)
                        statsd.stop()
                        hook.stop()
                        if not got or not events:
                            raise RuntimeError(f"observability on, but {got} metric(s) and "
                                               f"{events} lineage event(s) received")
                        received["metrics"] += got
                        received["lineage_events"] += events
                print(f"observability {setting}, round {r + 1}: {seconds[setting][-epochs:]}",
                      flush=True)
    finally:
        server.stop()
    return {"ratio": round(statistics.median(seconds["on"]) /
                           statistics.median(seconds["off"]), 3),
            "seconds": seconds, "received": received, "rounds": rounds, "epochs": epochs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="airflow_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3, help="measured epochs per mode")
    ap.add_argument("--modes", default="local,connect")
    ap.add_argument("--quick", action="store_true", help="one measured epoch per mode")
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json",
                    help="JSON file whose keys are updated (created when absent)")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    ap.add_argument("--no-preload", dest="preload", action="store_false",
                    help="the control: LocalExecutor's workers forked from the scheduler, "
                         "every task importing its modules itself (no forkserver preload)")
    ap.add_argument("--observability", action="store_true",
                    help="only metrics_overhead_ratio: StatsD and OpenLineage on / off")
    ap.add_argument("--rounds", type=int, default=2,
                    help="alternations of off/on standalones for --observability")
    a = ap.parse_args(argv)
    if a.quick:
        a.epochs = 1
    from bench.pipeline_bench import record

    if a.observability:
        with tempfile.TemporaryDirectory(prefix="airflow-bench-obs-") as work:
            obs = bench_observability(a.epochs, a.rounds, Path(work))
        record(a.out, a.history, "observability", {"metrics_overhead_ratio": obs["ratio"]},
               obs)
        return 0

    t0 = time.perf_counter()
    modes = {}
    for mode in a.modes.split(","):
        with tempfile.TemporaryDirectory(prefix=f"airflow-bench-{mode}-") as work:
            modes[mode] = bench_mode(mode, a.epochs, Path(work), a.preload)
            print(f"{mode}: {modes[mode]['epoch_seconds']:.1f} s an epoch "
                  f"({modes[mode]['epoch_seconds_all']})", flush=True)
    result: dict[str, Any] = {f"airflow_epoch_seconds_{m}": r["epoch_seconds"]
                              for m, r in modes.items()}
    result["airflow_run_end_lag_seconds"] = statistics.median(
        lag for r in modes.values() for lag in r["end_lag_seconds_all"])
    for m, r in modes.items():
        result[f"airflow_floor_seconds_{m}"] = r["floor_seconds"]
        result[f"airflow_over_floor_ratio_{m}"] = round(r["epoch_seconds"] /
                                                        r["floor_seconds"], 2)
        result[f"airflow_jobs_floor_seconds_{m}"] = r["jobs_floor_seconds"]
        result[f"airflow_over_jobs_floor_ratio_{m}"] = round(r["epoch_seconds"] /
                                                             r["jobs_floor_seconds"], 2)
        result[f"task_fixed_overhead_seconds_{m}"] = r["task_fixed_overhead_seconds"]
        result[f"airflow_run_tail_seconds_{m}"] = r["tail_seconds"]
        result[f"airflow_unchecked_seconds_{m}"] = r["unchecked_seconds"]
        result[f"airflow_checkpoint_overhead_ratio_{m}"] = round(
            r["epoch_seconds"] / r["unchecked_seconds"], 2)
        if r.get("spark_actions_per_task"):
            # the median epoch's actions over all tasks (warm-up included: same code path)
            per_epoch = [sum(x) for x in zip(*(t["actions"] for t in
                                               r["spark_actions_per_task"].values()),
                                             strict=False)]
            result[f"spark_actions_per_epoch_{m}"] = statistics.median(per_epoch)
        if r.get("reattach"):
            for k in ("reattach_recovery_ratio", "reattach_restart_control_ratio"):
                result[k] = r["reattach"][k]
    if "local" in modes and "connect" in modes:
        result["airflow_connect_over_local_ratio"] = round(
            modes["connect"]["epoch_seconds"] / modes["local"]["epoch_seconds"], 3)
    summary = {**result, "airflow_epochs": a.epochs, "airflow_preload": a.preload,
               "airflow_seconds": round(time.perf_counter() - t0, 1)}
    record(a.out, a.history, "airflow", summary, modes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
