"""`make demo`: the flights pipeline running in a real Airflow, from a fresh clone.

Uses local checkpoint storage (or MinIO on 127.0.0.1 with --s3), lands the first days of
2013, starts a Spark Connect server (the tasks' Spark: one long-lived driver instead of a
JVM per task; --spark local for the latter) and `airflow standalone` with this project's
dags/ and plugins/, triggers one run per day and shows the epochs completing as a live
table. Ctrl-C, SIGTERM and closing the
terminal (SIGHUP) stop everything it started, task processes and their Spark JVMs included,
and nothing else. State lives in .demo/ (a second run reuses it; --fresh wipes it).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

from spark_jobs.runtime.processes import free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO = Path(os.environ.get("DEMO_DIR") or ROOT / ".demo")
BIN = Path(sys.executable).parent
DAG = "flights_daily"
AIRCRAFT = "aircraft_utilisation"
ONTIME = "airport_ontime"
VIEWS = "flight_views"
DELAYS = "carrier_delays"
BRONZE = "bronze_flight_status"
BUCKETS = ("checkpoints", "flights")
#: Every process the demo starts, and every process those start (task processes, Spark
#: JVMs), inherits this variable: what carries it is the demo's to stop, nothing else is.
MARKER = "CKPT_DEMO_ID"
#: In .demo/ after a demo stopped on an error: the next one starts clean.
FAILED = "last-demo-failed"
DEMO_ID = os.environ.get(MARKER) or secrets.token_hex(8)


class DemoError(Exception):
    """A one-line reason the demo cannot start."""


# ---------------------------------------------------------------------------- checks
def check_java() -> None:
    java = shutil.which("java")
    if java is None:
        raise DemoError("Java 17 or newer is required for Spark: `java` is not on PATH "
                        "(Debian: apt-get install openjdk-17-jre-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr  # noqa: S603
    try:
        major = int(out.split('"')[1].split(".")[0])
    except (IndexError, ValueError):
        raise DemoError(f"cannot read the Java version from: {out.strip()[:200]}") from None
    if major < 17:
        raise DemoError(f"Java {major} found at {java}; Spark 4 needs Java 17 or newer")


def check_port_free(port: int, what: str) -> None:
    """Busy means something listens there. SO_REUSEADDR, as servers set it: sockets of a
    stopped demo lingering in TIME_WAIT for a minute do not make the port busy."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            raise DemoError(f"port {port} ({what}) is busy on 127.0.0.1: stop what uses it or "
                            f"pass another port (see --help)") from None


def wait_http(url: str, what: str, timeout: float, proc: subprocess.Popen,
              log: Path) -> None:
    import requests

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"{what} exited with code {proc.returncode}; see {log}")
        try:
            if requests.get(url, timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise DemoError(f"{what} did not answer at {url} within {timeout:.0f}s; see {log}")


def wait_port(port: int, what: str, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"{what} exited with code {proc.returncode}; see {log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise DemoError(f"{what} is not listening on 127.0.0.1:{port} after {timeout:.0f}s; "
                    f"see {log}")


# ---------------------------------------------------------------------------- services
class Services:
    """What the demo started, to stop exactly that on exit."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, cmd: list[str], env: dict[str, str], log: Path
              ) -> subprocess.Popen:
        fh = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(cmd, env={**env, MARKER: DEMO_ID}, cwd=ROOT,  # noqa: S603
                                stdout=fh,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def stop(self) -> None:
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                _say(f"stopping {name}...")
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        # Task processes that left the process group (Airflow's supervisor) and their JVMs.
        for pid in marked_processes(DEMO_ID):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def marked_processes(demo_id: str) -> list[int]:
    """Pids of the processes whose environment carries this demo's marker."""
    needle = f"{MARKER}={demo_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return pids


def _install(script: str) -> None:
    r = subprocess.run([str(ROOT / "scripts" / script)], cwd=ROOT)  # noqa: S603
    if r.returncode != 0:
        raise DemoError(f"scripts/{script} failed (exit {r.returncode}); see its output "
                        "above")


def ensure_spark_jars() -> None:
    """Spark's jars: Delta Lake's Spark runtime (the bronze writer and the jobs read and
    write Delta through Spark), the S3A connector and PostgreSQL's driver, fetched from
    Maven Central into .tools/jars on the first demo of a clone."""
    if not list((ROOT / ".tools/jars").glob("delta-spark_*.jar")):
        print("fetching Spark's jars from Maven Central (Delta Lake's runtime, S3A; first "
              "time only, about a minute) ...", flush=True)
    _install("install_spark_s3.sh")


def ensure_s3_tools() -> None:
    """MinIO, installed by the project's script when absent."""
    if not (ROOT / ".tools/bin/minio").exists():
        print("building MinIO with Go (first time only: 3 to 11 minutes on 2 cores) ...",
              flush=True)
    _install("install_minio.sh")
    if not (ROOT / ".tools/bin/minio").exists():
        raise DemoError("no MinIO binary after scripts/install_minio.sh (Go is needed to "
                        "build it); run without --s3 for local storage")


def start_minio(svc: Services, port: int) -> dict[str, str]:
    minio = ROOT / ".tools/bin/minio"
    if not minio.exists():
        raise DemoError("no MinIO binary: run scripts/install_minio.sh (make demo does), "
                        "or use --local")
    creds = DEMO / "minio-credentials.json"
    if not creds.exists():
        creds.write_text(json.dumps({"user": "demo", "password": secrets.token_hex(12)}))
    c = json.loads(creds.read_text())
    env = {**os.environ, "MINIO_ROOT_USER": c["user"], "MINIO_ROOT_PASSWORD": c["password"],
           "MINIO_BROWSER": "off"}
    (DEMO / "minio").mkdir(exist_ok=True)
    proc = svc.start("MinIO", [str(minio), "server", str(DEMO / "minio"), "--address",
                               f"127.0.0.1:{port}", "--quiet"], env, DEMO / "minio.log")
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/minio/health/live", "MinIO", 60, proc, DEMO / "minio.log")
    s3env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": c["user"],
             "AWS_SECRET_ACCESS_KEY": c["password"], "AWS_DEFAULT_REGION": "us-east-1"}
    import boto3

    s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=c["user"],
                      aws_secret_access_key=c["password"], region_name="us-east-1")
    have = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    for b in BUCKETS:
        if b not in have:
            s3.create_bucket(Bucket=b)
    return s3env


def start_spark_connect(svc: Services, port: int, env: dict[str, str]) -> dict[str, str]:
    """The tasks' Spark: a Spark Connect server (with the S3 settings of ``env``); returns
    the settings that point the DAG's tasks at it."""
    from spark_jobs.runtime.connect_server import ConnectServer

    server = ConnectServer(port=port, s3_endpoint=env.get("AWS_ENDPOINT_URL"), extra_env=env)
    proc = svc.start("Spark Connect server", server.command(), server.env(),
                     DEMO / "spark-connect.log")
    wait_port(port, "Spark Connect server", 180, proc, DEMO / "spark-connect.log")
    return {"CKPT_SPARK_MODE": "connect",
            "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
                {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port})}


def start_airflow(svc: Services, port: int, env: dict[str, str]) -> tuple[str, str]:
    home = DEMO / "airflow"
    home.mkdir(exist_ok=True)
    pw_file = home / "passwords.json"
    if not pw_file.exists():
        pw_file.write_text(json.dumps({"admin": secrets.token_urlsafe(9)}))
    url = f"http://127.0.0.1:{port}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}, **env,
           "AIRFLOW_HOME": str(home), "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__PARALLELISM": "4",
           "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",  # deploying guide: small machines
           "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
           # the tutorial's drill (a task killed after its snapshot); off in a deployment
           "AIRFLOW__DAG_CHECKPOINTS__DRILLS": "True",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(pw_file),
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API__BASE_URL": url,
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
           "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
           # task processes fork with their imports done (README "Deploying")
           "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
           "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD":
               "dag_checkpoints.task.preload,great_expectations",
           "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT),
           # not the fixed defaults (8793/8794): another Airflow may run on this machine
           "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
           "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
           "FLIGHTS_RETRY_DELAY_SECONDS": "5"}
    proc = svc.start("airflow standalone", [str(BIN / "airflow"), "standalone"], env,
                     DEMO / "airflow.log")
    wait_http(f"{url}/api/v2/monitor/health", "airflow standalone", 240, proc,
              DEMO / "airflow.log")
    return url, json.loads(pw_file.read_text())["admin"]


# ---------------------------------------------------------------------------- runs
def api(url: str, password: str):
    import requests

    tok = requests.post(f"{url}/auth/token", json={"username": "admin", "password": password},
                        timeout=10).json()["access_token"]
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {tok}"
    return s


def trigger_days(session, url: str, days: list[date], dag: str = DAG) -> list[str]:
    """Trigger one run per day (the run of day D+1 processes day D's files)."""
    deadline = time.time() + 120
    while session.get(f"{url}/api/v2/dags/{dag}").status_code != 200:
        if time.time() > deadline:
            raise DemoError(f"the DAG {dag} did not appear in Airflow; see .demo/airflow.log")
        time.sleep(2)
    runs = []
    for d in days:
        logical = (d + timedelta(days=1)).isoformat() + "T00:00:00Z"
        r = session.post(f"{url}/api/v2/dags/{dag}/dagRuns",
                         json={"logical_date": logical, "dag_run_id": f"demo__{d}"})
        if r.status_code not in (200, 409):  # 409: this day ran in an earlier demo
            raise DemoError(f"cannot trigger the run of {d}: {r.status_code} {r.text[:200]}")
        runs.append(f"demo__{d}")
    return runs


def update_bronze(session, url: str, env: dict[str, str], days: list[date],
                  connect_port: int | None) -> None:
    """The bronze table ``bronze_flight_status`` as another team's Spark job keeps it,
    outside any checkpoint (MERGE, then DELETE with deletion vectors on), one update per
    landed day, each announced to Airflow as an event of the asset carrier_delays is
    scheduled on."""
    from spark_jobs.flights.bronze_status import update
    from spark_jobs.runtime import spark_session

    deadline = time.time() + 180
    while True:  # the asset exists once Airflow has parsed carrier_delays
        r = session.get(f"{url}/api/v2/assets", params={"name_pattern": BRONZE})
        found = [a for a in (r.json().get("assets", []) if r.ok else []) if a["name"] == BRONZE]
        if found:
            break
        if time.time() > deadline:
            raise DemoError(f"the asset {BRONZE} did not appear in Airflow; see "
                            ".demo/airflow.log")
        time.sleep(2)
    remote = f"sc://127.0.0.1:{connect_port}" if connect_port else None
    spark = spark_session("demo-bronze", remote=remote, s3=env["CKPT_DATA"].startswith("s3"),
                          endpoint_url=env.get("AWS_ENDPOINT_URL"))
    try:
        location = f"{env['CKPT_DATA'].rstrip('/')}/tables/{BRONZE}"
        for d in days:
            landed = f"{env['CKPT_DATA'].rstrip('/')}/raw/flights/{d}.csv"
            for attempt in (1, 2):  # MERGE by key and DELETE: safe to run again
                try:
                    version = update(spark, location, landed)
                    break
                except Exception as exc:  # noqa: BLE001 - named in one line below
                    line = (str(exc).strip().splitlines() or [""])[0][:300]
                    if attempt == 2:
                        raise DemoError(f"the bronze writer failed on {d}: "
                                        f"{type(exc).__name__}: {line}") from None
                    print(f"bronze writer: {type(exc).__name__}: {line}; once more",
                          flush=True)
            event = {"asset_id": found[0]["id"],
                     "extra": {"table_version": version, "data_day": str(d)}}
            for _ in range(10):  # SQLite under `standalone` answers 500 while it is busy
                r = session.post(f"{url}/api/v2/assets/events", json=event)
                if r.status_code < 500:
                    break
                time.sleep(3)
            if not r.ok:
                raise DemoError(f"cannot announce {BRONZE} v{version}: {r.status_code} "
                                f"{r.text[:200]}")
    finally:
        spark.stop()


def progress(coord, session, url: str, runs: list[str] | None, dag: str = DAG) -> str:
    """A table of the epochs (with the Delta table versions each published) and a bar of
    the runs finished (``runs`` None: every run of the DAG, for one scheduled on assets)."""
    from checkpointing.records.two_phase_publish import published_tables, read_manifest
    from checkpointing.views.listing import list_epochs

    manifest = read_manifest(coord.storage, coord.layout)
    rows = []
    for st in reversed(list_epochs(coord, limit=10).rows):  # damage shown, never fatal
        dur = f"{st.duration_ms / 1000:6.1f}s" if st.duration_ms else "      -"
        tables = ", ".join(f"{t.removeprefix('gold_')} v{v}" for t, v in
                           published_tables(manifest, st.epoch_id).items())
        rows.append(f"  {st.epoch_id:>5}  {st.run_id:<22} {st.status:<10} {st.tasks_acked}/"
                    f"{st.tasks_total}  {dur}  {st.reason or tables}")
    if runs is None:
        r = session.get(f"{url}/api/v2/dags/{dag}/dagRuns")
        runs = [d["dag_run_id"] for d in r.json().get("dag_runs", [])] if r.ok else []
    done = 0
    for run in runs:
        r = session.get(f"{url}/api/v2/dags/{dag}/dagRuns/{run}")
        done += r.ok and r.json()["state"] in ("success", "failed")
    bar = "#" * (30 * done // max(len(runs), 1))
    return (f"  {dag}\n  epoch  run                    status     acked   took     "
            "Delta tables published\n" + "\n".join(rows)
            + f"\n  runs finished [{bar:<30}] {done}/{len(runs)}")


def read_them(coords: list) -> str:
    """How to read the published Delta tables from outside the project."""
    from checkpointing.records.two_phase_publish import read_manifest

    lines = []
    for coord in coords:
        m = read_manifest(coord.storage, coord.layout)
        for name, out in sorted((m.outputs if m else {}).items()):
            if "table" in (out.meta or {}):
                lines.append(f"  {name:<28} v{out.meta['table_version']:<4} "
                             f"{out.meta['table']['location']}")
    if not lines:
        return ""
    return ("\nDelta tables (any Delta reader; in Python: from deltalake import DeltaTable; "
            "DeltaTable(path).to_pandas()):\n" + "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=5, help="days of January 2013 to run")
    ap.add_argument("--s3", action="store_true",
                    help="MinIO (S3) storage instead of local files; the first time builds "
                         "MinIO (3-11 minutes)")
    ap.add_argument("--local", action="store_true", help=argparse.SUPPRESS)  # the default
    ap.add_argument("--port", type=int, default=8080, help="Airflow UI port")
    ap.add_argument("--s3-port", type=int, default=9000, help="MinIO port")
    ap.add_argument("--spark", choices=("connect", "local"), default="connect",
                    help="connect: tasks are clients of one Spark Connect server (default); "
                         "local: each task starts a Spark of its own (a JVM per task)")
    ap.add_argument("--connect-port", type=int, default=15002, help="Spark Connect port")
    ap.add_argument("--fresh", action="store_true", help="wipe .demo/ first")
    a = ap.parse_args(argv)
    failed = DEMO / FAILED
    if failed.exists() and not a.fresh:
        print("the last demo stopped on an error: starting clean (its runs and state are "
              "not resumed)", flush=True)
    if (a.fresh or failed.exists()) and DEMO.exists():
        shutil.rmtree(DEMO)
    DEMO.mkdir(exist_ok=True)
    svc = Services()
    # Ctrl-C (SIGINT), SIGTERM and closing the terminal (SIGHUP) stop the demo once: `make`
    # forwards a signal to its child as well, and a second one must not interrupt the stop.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    try:
        check_java()
        check_port_free(a.port, "Airflow UI")
        if a.spark == "connect":
            check_port_free(a.connect_port, "Spark Connect server")
        if a.s3:
            check_port_free(a.s3_port, "S3/MinIO")
            ensure_s3_tools()
        ensure_spark_jars()
        if not a.s3:
            env = {"CKPT_STORAGE": f"file://{DEMO}/ckpt", "CKPT_DATA": f"file://{DEMO}/data"}
        else:
            env = {**start_minio(svc, a.s3_port), "CKPT_STORAGE": "s3://checkpoints/",
                   "CKPT_DATA": "s3://flights/"}
        os.environ.update(env)
        from checkpointing import Coordinator, open_storage
        from spark_jobs.flights.landing import land

        days = [date(2013, 1, 1) + timedelta(days=i) for i in range(a.days)]
        print(f"landing {len(days)} days of flights into {env['CKPT_DATA']} ...", flush=True)
        land(open_storage(env["CKPT_DATA"]), days, malformed_rate=0.002, seed=1)
        if a.spark == "connect":
            print("starting the Spark Connect server (about 10 s) ...", flush=True)
            env.update(start_spark_connect(svc, a.connect_port, env))
        print("starting airflow standalone (20 s to a few minutes on 2 cores) ...", flush=True)
        url, password = start_airflow(svc, a.port, env)
        session = api(url, password)
        runs = trigger_days(session, url, days)
        # The second example pipeline, on the same landed files, after flights_daily's runs.
        aircraft_runs = trigger_days(session, url, days, AIRCRAFT)
        coord = Coordinator(open_storage(env["CKPT_STORAGE"]), DAG)
        aircraft = Coordinator(open_storage(env["CKPT_STORAGE"]), AIRCRAFT)
        # The third, airport_ontime, runs by itself: scheduled on flights_daily's table, it
        # reads the table's changes each time flights_daily commits a version.
        ontime = Coordinator(open_storage(env["CKPT_STORAGE"]), ONTIME)
        # So does flight_views: two views declared by their SQL over the same table.
        views = Coordinator(open_storage(env["CKPT_STORAGE"]), VIEWS)
        # The fourth, carrier_delays, continues a bronze table plain Spark maintains.
        print(f"updating the bronze Delta table {BRONZE} with plain Spark (MERGE, DELETE "
              "with deletion vectors) ...", flush=True)
        update_bronze(session, url, env, days,
                      a.connect_port if a.spark == "connect" else None)
        delays = Coordinator(open_storage(env["CKPT_STORAGE"]), DELAYS)
        print(f"\nAirflow UI: {url}  (sign in as admin / {password})")
        print(f"Epochs page: {url}/dags/{DAG}/plugin/epochs    Ctrl-C stops the demo\n")
        spare, next_run = days[-1] + timedelta(days=1), days[-1] + timedelta(days=2)
        hint = ""
        while True:
            table = progress(coord, session, url, runs)
            if not hint and f"] {len(runs)}/{len(runs)}" in table:
                # The runs are done: land the next day's file for a run of the user's own
                # (the tutorial's retry drill), so that run has its day to consume.
                land(open_storage(env["CKPT_DATA"]), [spare], malformed_rate=0.002, seed=1,
                     dims=False)
                hint = (f"\nNext day landed ({spare}): trigger {DAG} with logical date "
                        f"{next_run} to run it.")
            print("\033[2J\033[H" if sys.stdout.isatty() else "", end="")
            print(f"Airflow UI: {url}  (admin / {password})   "
                  f"Epochs: {url}/dags/{DAG}/plugin/epochs")
            print(table)
            print(progress(aircraft, session, url, aircraft_runs, AIRCRAFT))
            print(progress(ontime, session, url, None, ONTIME))
            print(progress(views, session, url, None, VIEWS))
            print(progress(delays, session, url, None, DELAYS))
            print(read_them([coord, aircraft, ontime, delays]) + hint, flush=True)
            time.sleep(5)
    except DemoError as exc:
        # the next demo starts clean rather than resuming this one's queued runs
        failed.write_text(f"{exc}\n")
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _say("\nstopping the demo")
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # finish stopping whatever comes
        svc.stop()


def _stop(*_: object) -> None:
    """The first stop signal interrupts the demo; any later one is ignored."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _say(text: str) -> None:
    """Print unless the terminal is gone (after SIGHUP, stdout may be closed)."""
    try:
        print(text, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
