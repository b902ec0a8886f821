"""The deployment of docker/docker-compose.yml run as processes on 127.0.0.1: PostgreSQL
and Redis from Debian's packages, MinIO, a Spark standalone master and worker, the Spark
Connect server on that master, and Airflow's api-server, scheduler, dag-processor,
triggerer and Celery workers under CeleryExecutor.

    scripts/cluster.sh up [--free-ports] [--home DIR]    # start everything, wait until healthy
    scripts/cluster.sh status [--json]                    # each service: pid, port, alive
    scripts/cluster.sh down                               # stop exactly what `up` started
    scripts/cluster.sh kill SERVICE [--signal KILL]      # a failure drill's fault
    scripts/cluster.sh start SERVICE                      # start one stopped service again

The compose file is the one source of truth: every Airflow process gets the environment of
its ``x-airflow-common`` block, with the compose host names (``postgres``, ``redis:6379``,
``minio:9000``, ``spark-master:7077``, ...) rewritten to 127.0.0.1 and the ports this
machine uses, and its paths (``/opt/dag-checkpoints``, ``/opt/airflow``) to this checkout
and the cluster's home. Services run with the compose commands, the same rewriting applied.
What a container gives for free is added here and named: a home per service, distinct log
server ports for the two workers on one host, ``--host 127.0.0.1`` for the Spark worker.

State (pids, ports, logs, data) lives in the cluster home, ``.cluster/`` by default.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spark_jobs.runtime.processes import (
    descendants,
    free_port,
    listening,
    process_groups,
    stop_group,
    tail,
)

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker" / "docker-compose.yml"
DEFAULT_HOME = ROOT / ".cluster"
VENV_BIN = Path(sys.executable).parent

#: Ports a container listens on, per compose service (host name) and role. The compose file
#: names these numbers in its commands, URLs and port mappings; here each gets a host port.
CONTAINER_PORTS: dict[str, dict[str, int]] = {
    "postgres": {"db": 5432},
    "redis": {"redis": 6379},
    "minio": {"api": 9000, "console": 9001},
    "spark-master": {"master": 7077, "ui": 8081},
    "spark-worker": {"ui": 8082},
    "spark-connect": {"grpc": 15002},
    "airflow-apiserver": {"http": 8080},
    "airflow-triggerer": {"logs": 8794},
    "airflow-worker": {"logs": 8793},
}
#: One-off services: they run to completion during `up` (compose: service_completed_successfully).
ONE_OFF = ("minio-init", "metastore-init", "airflow-init")
#: Start order (compose's depends_on, flattened); `down` stops in reverse.
ORDER = ("postgres", "redis", "minio", "minio-init", "metastore-init", "spark-master",
         "spark-worker",
         "spark-connect", "airflow-init", "airflow-apiserver", "airflow-scheduler",
         "airflow-dag-processor", "airflow-triggerer", "airflow-worker")
#: Directories of the home holding data (compose's volumes); `down --volumes` deletes them.
DATA_DIRS = ("postgres", "redis", "minio", "spark-work", "airflow")
#: SIGTERM for all but PostgreSQL, whose SIGTERM waits for every client to leave.
STOP_SIGNAL = {"postgres": signal.SIGINT}


class ClusterError(RuntimeError):
    """A service that cannot start or a cluster in an unexpected state; one line."""


# --------------------------------------------------------------------------- compose
def load_compose(path: Path = COMPOSE) -> dict:
    return yaml.safe_load(path.read_text())


def replicas(compose: dict, service: str) -> int:
    return int(((compose["services"][service].get("deploy") or {}).get("replicas")) or 1)


def _subst_vars(value: str, environ: dict[str, str]) -> str:
    """Compose's ``${VAR:-default}`` and ``$$`` (a literal ``$``)."""
    value = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: environ.get(m[1]) or m[2], value)
    value = re.sub(r"\$\{(\w+)\}", lambda m: environ.get(m[1], ""), value)
    return value.replace("$$", "$")


@dataclass
class Ports:
    """Host port of each (service, role); ``compose`` keeps the container's number where it
    is free on this machine, ``free`` takes any free port (tests, several clusters)."""

    by_key: dict[str, int] = field(default_factory=dict)

    def of(self, service: str, role: str) -> int:
        return self.by_key[f"{service}.{role}"]

    def by_container(self, service: str, port: int) -> int:
        for role, p in CONTAINER_PORTS.get(service, {}).items():
            if p == port:
                return self.of(service, role)
        raise ClusterError(f"compose names {service}:{port}, a port this script does not map")

    @classmethod
    def allocate(cls, compose: dict, free: bool) -> Ports:
        ports: dict[str, int] = {}
        taken: set[int] = set()
        for service, roles in CONTAINER_PORTS.items():
            n = replicas(compose, service) if service in compose["services"] else 1
            for i in range(n):
                name = service if n == 1 else f"{service}-{i + 1}"
                for role, p in roles.items():
                    want = None if free or p in taken or listening(p) else p
                    port = want or free_port(taken=taken)
                    taken.add(port)
                    ports[f"{name}.{role}"] = port
        return cls(ports)


HOST_REF = re.compile(r"(?<=[/@])(" + "|".join(re.escape(s) for s in CONTAINER_PORTS) +
                      r")(?::(\d+))?(?=[/]|$)")


def rewrite(value: str, ports: Ports) -> str:
    """Compose host names in a URL or connection to 127.0.0.1 and this machine's ports."""
    if value.lstrip().startswith("{"):  # an Airflow connection as JSON
        conn = json.loads(value)
        host = conn.get("host", "")
        m = re.fullmatch(r"(\w+://)?([\w-]+)(?::(\d+))?", host)
        if m and m[2] in CONTAINER_PORTS:
            if "port" in conn:
                conn["host"] = "127.0.0.1"
                conn["port"] = ports.by_container(m[2], int(conn["port"]))
            else:
                conn["host"] = (f"{m[1] or ''}127.0.0.1:"
                                f"{ports.by_container(m[2], int(m[3]))}")
        return json.dumps(conn)

    def with_port(m: re.Match[str]) -> str:
        service = m[1]
        port = int(m[2]) if m[2] else next(iter(CONTAINER_PORTS[service].values()))
        return f"127.0.0.1:{ports.by_container(service, port)}"

    return HOST_REF.sub(with_port, value)


def common_env(compose: dict, ports: Ports, home: Path,
               environ: dict[str, str] | None = None) -> dict[str, str]:
    """The ``x-airflow-common`` environment, as this machine runs it."""
    environ = dict(os.environ if environ is None else environ)
    out = {}
    for key, value in compose["x-airflow-common"]["environment"].items():
        v = _subst_vars(str(value), environ)
        v = v.replace("/opt/dag-checkpoints", str(ROOT)).replace("/opt/airflow",
                                                                 str(home / "airflow"))
        out[key] = rewrite(v, ports)
    return out


def service_env(compose: dict, service: str, environ: dict[str, str] | None = None
                ) -> dict[str, str]:
    """A service's own ``environment`` block (postgres, minio), variables substituted."""
    environ = dict(os.environ if environ is None else environ)
    env = compose["services"][service].get("environment") or {}
    return {k: _subst_vars(str(v), environ) for k, v in env.items()}


# --------------------------------------------------------------------------- services
@dataclass
class Service:
    name: str
    cmd: list[str]
    env: dict[str, str]
    log: str
    port: int | None = None  # what `up` waits for and `status` checks
    user: str | None = None  # PostgreSQL refuses to run as root
    pid: int | None = None


@dataclass
class Cluster:
    home: Path
    ports: Ports
    services: dict[str, Service] = field(default_factory=dict)

    # -- state file ----------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.home / "cluster.json"

    def save(self) -> None:
        data = {"home": str(self.home), "ports": self.ports.by_key,
                "services": {n: asdict(s) for n, s in self.services.items()}}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.state_file)

    @classmethod
    def load(cls, home: Path) -> Cluster:
        f = home / "cluster.json"
        if not f.exists():
            raise ClusterError(f"no cluster in {home} (nothing was started: run `up` first)")
        data = json.loads(f.read_text())
        return cls(home, Ports(data["ports"]),
                   {n: Service(**s) for n, s in data["services"].items()})

    # -- endpoints -----------------------------------------------------------
    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.of('airflow-apiserver', 'http')}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports.of('minio', 'api')}"

    @property
    def connect_url(self) -> str:
        return f"sc://127.0.0.1:{self.ports.of('spark-connect', 'grpc')}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self.ports.of('spark-master', 'ui')}"

    def airflow_env(self) -> dict[str, str]:
        """The environment of every Airflow process (and of a client such as the drills)."""
        return dict(self.services["airflow-scheduler"].env)

    # -- process control -------------------------------------------------------
    def alive(self, name: str) -> bool:
        pid = self.services[name].pid
        return pid is not None and pid > 0 and _alive(pid)

    def start(self, name: str, timeout: float = 300) -> None:
        svc = self.services[name]
        if self.alive(name):
            raise ClusterError(f"{name} is already running (pid {svc.pid})")
        log = open(svc.log, "ab")  # noqa: SIM115 - handed to the child
        kw: dict[str, Any] = {}
        if svc.user and os.geteuid() == 0:
            kw = {"user": svc.user, "group": pwd.getpwnam(svc.user).pw_gid}
        proc = subprocess.Popen(svc.cmd, env=svc.env, cwd=ROOT, stdout=log,  # noqa: S603
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **kw)
        log.close()
        svc.pid = proc.pid
        self.save()
        if name in ONE_OFF:
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                stop_group(proc.pid, 10, sig=signal.SIGTERM)
                raise ClusterError(f"{name} did not finish in {timeout:g}s: "
                                   f"{_log_tail(svc.log)}") from None
            if rc != 0:
                raise ClusterError(f"{name} failed (exit {rc}): {_log_tail(svc.log)}")
            return
        self.wait_ready(name, proc, timeout)

    def wait_ready(self, name: str, proc: subprocess.Popen | None = None,
                   timeout: float = 300) -> None:
        svc = self.services[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise ClusterError(f"{name} exited ({proc.returncode}): {_log_tail(svc.log)}")
            if self.ready(name):
                return
            time.sleep(0.5)
        raise ClusterError(f"{name} not ready in {timeout:g}s; see {svc.log}: "
                           f"{_log_tail(svc.log)}")

    def ready(self, name: str) -> bool:
        svc = self.services[name]
        if not self.alive(name):
            return False
        if name == "spark-worker":
            return self.spark_workers_alive() > 0
        if name == "airflow-apiserver":
            return _http_ok(f"{self.api_url}/api/v2/monitor/health")
        if svc.port:
            return listening(svc.port)
        return True  # scheduler, dag-processor, workers: the health endpoint reports them

    def spark_workers_alive(self) -> int:
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=3) as r:  # noqa: S310
                return sum(w.get("state") == "ALIVE" for w in json.load(r).get("workers", []))
        except OSError:
            return 0

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Signal every process of a service, as a container's death would: its process
        group and every descendant, including those in a session of their own (Airflow's
        task processes; a group signal alone left a Celery worker's running task alive,
        and it acknowledged after its worker was gone). Returns the service's pid."""
        svc = self.services[name]
        if not self.alive(name):
            raise ClusterError(f"{name} is not running")
        assert svc.pid is not None  # alive
        tree = descendants(svc.pid)  # before the signal: orphans lose their parent link
        os.killpg(svc.pid, sig)
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return svc.pid

    def stop(self, name: str, timeout: float = 30) -> None:
        svc = self.services[name]
        if svc.pid and _alive(svc.pid):
            stop_group(svc.pid, timeout, sig=STOP_SIGNAL.get(name, signal.SIGTERM))
        svc.pid = None
        self.save()

    def leftover(self) -> list[int]:
        """Processes still running from the process groups of the running services."""
        groups = {s.pid for s in self.services.values() if s.pid}
        return [pid for pid, pgid in process_groups() if pgid in groups]


def build(compose: dict, home: Path, ports: Ports,
          extra_env: dict[str, str] | None = None) -> Cluster:
    """Every service of the compose file as a local command (nothing is started);
    ``extra_env`` is added to every Airflow process's environment (drill settings)."""
    logs = home / "logs"
    env = common_env(compose, ports, home)
    spark_home = _spark_home()
    path = f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    # What the image's ENV and a container give each process (see docker/Dockerfile).
    base.update({"PATH": path, "SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": sys.executable,
                 "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1",
                 "AIRFLOW_HOME": str(home / "airflow")})
    api = f"http://127.0.0.1:{ports.of('airflow-apiserver', 'http')}"
    af_env = {**base, **env,
              "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__BASE_URL": api,
              # 2 cores: the guide's setting (compose leaves Airflow's default of 32)
              "AIRFLOW__CORE__PARALLELISM": os.environ.get("AIRFLOW__CORE__PARALLELISM", "4"),
              "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT":
                  str(ports.of("airflow-triggerer", "logs")),
              **(extra_env or {})}
    c = Cluster(home, ports)

    def add(name: str, cmd: list[str], env_: dict[str, str], port: int | None = None,
            user: str | None = None) -> None:
        c.services[name] = Service(name, cmd, env_, str(logs / f"{name}.log"), port, user)

    svcs = compose["services"]
    # PostgreSQL: Debian's server on a data directory of the cluster's own.
    pg, pg_dir = _pg_bin(), _pg_dir(home)
    add("postgres", [str(pg / "postgres"), "-D", str(pg_dir / "data"),
                     "-p", str(ports.of("postgres", "db")), "-k", str(pg_dir),
                     "-c", "listen_addresses=127.0.0.1"], base,
        ports.of("postgres", "db"), user=_pg_user())
    add("redis", ["redis-server", "--bind", "127.0.0.1", "--port",
                  str(ports.of("redis", "redis")), "--save", "", "--appendonly", "no",
                  "--dir", str(home / "redis")], base, ports.of("redis", "redis"))
    # MinIO: `server /data --console-address :9001` with this machine's paths and ports.
    minio_args = [a.replace("/data", str(home / "minio")) for a in svcs["minio"]["command"]
                  .split()]
    minio_args = [f"127.0.0.1:{ports.of('minio', 'console')}" if a == ":9001" else a
                  for a in minio_args]
    add("minio", [_minio(), *minio_args, "--address", f"127.0.0.1:{ports.of('minio', 'api')}"],
        {**base, **service_env(compose, "minio"), "MINIO_BROWSER": "off"},
        ports.of("minio", "api"))
    add("minio-init", [sys.executable, str(ROOT / "docker" / "minio_init.py")], {**base, **env})
    add("metastore-init", [sys.executable, str(ROOT / "docker" / "metastore_init.py")],
        {**base, **env})
    # Spark: the compose commands, host names and ports rewritten.
    for name in ("spark-master", "spark-worker"):
        cmd = _spark_cmd(svcs[name]["command"], spark_home, ports, name)
        add(name, cmd, {**base, **env, "SPARK_WORKER_DIR": str(home / "spark-work"),
                        "SPARK_LOG_DIR": str(logs)},
            ports.of("spark-master", "master") if name == "spark-master" else None)
    connect = [rewrite_arg(a, ports) for a in svcs["spark-connect"]["command"]]
    connect = ["127.0.0.1" if a == "0.0.0.0" else a for a in connect]  # noqa: S104
    connect[0] = sys.executable if connect[0] == "python" else connect[0]
    connect = _map_flag(connect, "--port", str(ports.of("spark-connect", "grpc")))
    add("spark-connect", connect, {**base, **env}, ports.of("spark-connect", "grpc"))
    # Airflow: the init script, then each component with the common environment.
    init = svcs["airflow-init"]["entrypoint"]
    add("airflow-init", [init[0], str(ROOT / "docker" / Path(init[1]).name)], af_env)
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer"):
        cmd = [str(VENV_BIN / "airflow"), *svcs[name]["command"][1:]]
        if name == "airflow-apiserver":
            cmd = _map_flag(cmd, "--port", str(ports.of(name, "http")))
        add(name, cmd, af_env, ports.of(name, "http") if name == "airflow-apiserver" else None)
    for i in range(replicas(compose, "airflow-worker")):
        name = f"airflow-worker-{i + 1}"
        cmd = [str(VENV_BIN / "airflow"), *svcs["airflow-worker"]["command"][1:],
               "--celery-hostname", f"{name}@%h"]
        # Two workers on one host: a log server port each (a container has its own host).
        add(name, cmd, {**af_env, "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT":
                        str(ports.of(name, "logs"))})
    return c


def rewrite_arg(arg: str, ports: Ports) -> str:
    return rewrite(arg, ports) if "://" in arg else arg


def _map_flag(cmd: list[str], flag: str, value: str) -> list[str]:
    out = list(cmd)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def _spark_cmd(command: list[str], spark_home: Path, ports: Ports, name: str) -> list[str]:
    """A compose ``["/bin/sh", "-c", "$$SPARK_HOME/bin/spark-class ..."]`` as an argv."""
    argv = command[2].replace("$$SPARK_HOME", str(spark_home)).split()
    argv = [rewrite(a, ports) if a.startswith("spark://") else a for a in argv]
    if name == "spark-master":
        argv = _map_flag(argv, "--host", "127.0.0.1")
        argv = _map_flag(argv, "--port", str(ports.of(name, "master")))
        argv = _map_flag(argv, "--webui-port", str(ports.of(name, "ui")))
    else:
        argv = _map_flag(argv, "--host", "127.0.0.1")
        argv = _map_flag(argv, "--webui-port", str(ports.of(name, "ui")))
    return argv


def _spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]))
    if not found:
        raise ClusterError("PostgreSQL is not installed (apt-get install postgresql)")
    return Path(found[-1]).parent


def _pg_dir(home: Path) -> Path:
    """PostgreSQL's directory (data and socket): in the home when the postgres user can
    reach it, else (a home under a private directory, as pytest's) one of /tmp named after
    the home, so that `up` after `down` finds its database again."""
    home = home.resolve()
    if _pg_user() is None or all(p.stat().st_mode & 0o001 for p in
                                 [h for h in (home, *home.parents) if h.exists()]):
        return home / "postgres"
    digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]  # noqa: S324
    return Path(tempfile.gettempdir()) / f"ckpt-cluster-pg-{digest}"


def _pg_user() -> str | None:
    return "postgres" if os.geteuid() == 0 else None


def _minio() -> str:
    for cand in (ROOT / ".tools/bin/minio", shutil.which("minio")):
        if cand and os.access(cand, os.X_OK):
            return str(cand)
    raise ClusterError("no minio binary: run scripts/install_minio.sh")


# --------------------------------------------------------------------------- one-offs
def init_postgres(c: Cluster, compose: dict) -> None:
    """initdb (once) and, after the server is up, the role and database of the compose file."""
    pg = _pg_bin()
    pg_dir = _pg_dir(c.home)
    data = pg_dir / "data"
    user = _pg_user()
    kw: dict[str, Any] = {"user": user, "group": pwd.getpwnam(user).pw_gid} if user else {}
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if user:
            for p in (pg_dir, data):
                shutil.chown(p, user, user)
        r = subprocess.run([str(pg / "initdb"), "-D", str(data), "-U", "postgres",  # noqa: S603
                            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8"],
                           capture_output=True, text=True, **kw)
        if r.returncode != 0:
            raise ClusterError(f"initdb failed: {r.stderr.strip()[-500:]}")


def create_pg_role(c: Cluster, compose: dict) -> None:
    env = service_env(compose, "postgres")
    user, pw, db = env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]
    for what, v in (("POSTGRES_USER", user), ("POSTGRES_DB", db), ("POSTGRES_PASSWORD", pw)):
        if not re.fullmatch(r"[\w.-]+", v):  # they are spliced into SQL below
            raise ClusterError(f"{what} may hold letters, digits, '_', '.', '-' only")

    def psql(sql: str) -> str:
        r = subprocess.run(["psql", "-h", str(_pg_dir(c.home)),  # noqa: S603, S607
                            "-p", str(c.ports.of("postgres", "db")), "-U", "postgres", "-qtA",
                            "-d", "postgres", "-c", sql], capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterError(f"psql failed: {r.stderr.strip()[-300:]}")
        return r.stdout.strip()

    if psql(f"select 1 from pg_roles where rolname='{user}'") != "1":  # noqa: S608
        psql(f"create role \"{user}\" login password '{pw}'")
    # metastore-init creates the metastore's database as this role (the image's is superuser)
    psql(f"alter role \"{user}\" createdb")
    if psql(f"select 1 from pg_database where datname='{db}'") != "1":  # noqa: S608
        psql(f"create database \"{db}\" owner \"{user}\"")


# --------------------------------------------------------------------------- commands
def up(home: Path = DEFAULT_HOME, free_ports: bool = False, timeout: float = 600,
       log=print, extra_env: dict[str, str] | None = None) -> Cluster:
    """Start every service in compose order; returns when the api-server is healthy and
    the scheduler, triggerer, dag-processor and both workers have registered."""
    _require_packages()
    home = home.resolve()
    if (home / "cluster.json").exists():
        old = Cluster.load(home)
        running = [n for n in old.services if old.alive(n)]
        if running:
            raise ClusterError(f"a cluster from {home} is running ({', '.join(running)}): "
                               "`down` first")
    for d in ("logs", *DATA_DIRS):
        (home / d).mkdir(parents=True, exist_ok=True)
    compose = load_compose()
    c = build(compose, home, Ports.allocate(compose, free_ports), extra_env)
    c.save()
    t0 = time.monotonic()
    try:
        for name in c.services:
            if name == "postgres":
                init_postgres(c, compose)
            log(f"starting {name}", flush=True)
            c.start(name, timeout)
            if name == "postgres":
                create_pg_role(c, compose)
        wait_healthy(c, timeout)
    except BaseException:
        down(home, log=lambda *a, **k: None)
        raise
    log(f"cluster up in {time.monotonic() - t0:.0f} s: Airflow {c.api_url}, "
        f"MinIO {c.s3_endpoint}, Spark {c.master_ui}, Connect {c.connect_url}", flush=True)
    return c


def wait_healthy(c: Cluster, timeout: float = 300) -> None:
    """Airflow's own health view: scheduler, triggerer and dag-processor heartbeats; and
    both Celery workers answering a ping on the broker."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        dead = [n for n in c.services if n not in ONE_OFF and not c.alive(n)]
        if dead:
            raise ClusterError(f"{dead[0]} exited: {_log_tail(c.services[dead[0]].log, 600)}")
        h = _http_json(f"{c.api_url}/api/v2/monitor/health") or {}
        ok = all((h.get(k) or {}).get("status") == "healthy"
                 for k in ("metadatabase", "scheduler", "triggerer", "dag_processor"))
        workers = celery_workers(c) if ok else []
        want = sum(n.startswith("airflow-worker-") for n in c.services)
        if ok and len(workers) >= want:
            return
        last = f"health {h}, workers {workers}"
        time.sleep(2)
    raise ClusterError(f"cluster not healthy in {timeout:g}s: {last}")


def celery_workers(c: Cluster) -> list[str]:
    """Names of the Celery workers that answer a ping (``airflow-worker-1@host``, ...)."""
    r = subprocess.run([str(VENV_BIN / "celery"), "--broker",  # noqa: S603
                        c.airflow_env()["AIRFLOW__CELERY__BROKER_URL"], "inspect", "ping",
                        "--json", "--timeout", "2"],
                       capture_output=True, text=True, env=c.airflow_env(), timeout=60)
    try:
        return sorted(k for d in [json.loads(r.stdout or "{}")] for k in d)
    except json.JSONDecodeError:
        return []


def down(home: Path = DEFAULT_HOME, log=print, volumes: bool = False) -> list[int]:
    """Stop what `up` started, in reverse order; the pids of anything left behind.
    ``volumes`` also deletes the data (PostgreSQL, MinIO, Redis, Airflow's home), as
    ``docker compose down -v`` deletes the volumes; logs stay."""
    c = Cluster.load(home.resolve())
    groups = {s.pid for s in c.services.values() if s.pid}  # before stop() forgets them
    for name in reversed(list(c.services)):
        if c.services[name].pid and c.alive(name):
            log(f"stopping {name}", flush=True)
        c.stop(name)
    left = [pid for pid, pgid in process_groups() if pgid in groups]
    for pid in left:
        log(f"still running after down: pid {pid}", flush=True)
    if volumes and not left:
        for d in (_pg_dir(c.home), *(c.home / n for n in DATA_DIRS)):
            shutil.rmtree(d, ignore_errors=True)
    return left


def status(home: Path = DEFAULT_HOME) -> list[dict]:
    c = Cluster.load(home.resolve())
    rows = []
    for name, s in c.services.items():
        rows.append({"service": name, "pid": s.pid, "port": s.port,
                     "state": ("done" if name in ONE_OFF else
                               "up" if c.ready(name) else
                               "starting" if c.alive(name) else "down"),
                     "log": s.log})
    return rows


def _require_packages() -> None:
    """What the compose images provide, from Debian's packages and the project's tools."""
    missing = [p for p, b in (("redis-server", "redis-server"), ("postgresql", "psql"))
               if not shutil.which(b)]
    if missing:
        apt = ["apt-get", "install", "-y", "-q", *missing]
        if os.geteuid() != 0:
            apt = ["sudo", *apt]
        print(f"installing Debian's {' '.join(missing)}...", flush=True)
        if subprocess.run(apt, capture_output=True).returncode != 0:  # noqa: S603
            subprocess.run([*apt[:-len(missing) - 3], "apt-get", "update", "-q"],  # noqa: S603
                           capture_output=True)
            subprocess.run(apt, check=True, capture_output=True)  # noqa: S603
    try:
        import airflow.providers.celery  # noqa: F401
    except ImportError:
        raise ClusterError("the Celery provider is missing: `make install` (requirements.txt "
                           "pins apache-airflow[celery])") from None
    if not (ROOT / ".tools/bin/minio").exists() and not shutil.which("minio"):
        subprocess.run([str(ROOT / "scripts/install_minio.sh")], check=True)  # noqa: S603
    if not list((ROOT / ".tools/jars").glob("*.jar")):
        subprocess.run([str(ROOT / "scripts/install_spark_s3.sh")], check=True)  # noqa: S603


# --------------------------------------------------------------------------- helpers
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not reaped by its parent) is not running
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _log_tail(path: str, n: int = 1500) -> str:
    return tail(path, n, one_line=True)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:  # noqa: S310 - 127.0.0.1
            return r.status == 200
    except OSError:
        return False


def _http_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:  # noqa: S310 - 127.0.0.1
            return json.load(r)
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("up", "down", "status", "kill", "start"))
    ap.add_argument("service", nargs="?")
    ap.add_argument("--home", type=Path, default=DEFAULT_HOME)
    ap.add_argument("--free-ports", action="store_true",
                    help="any free ports instead of the compose file's")
    ap.add_argument("--signal", default="KILL", help="for kill: KILL, TERM, ...")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--volumes", action="store_true",
                    help="for down: delete the data too (as `docker compose down -v`)")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args(argv)
    try:
        if a.action == "up":
            up(a.home, a.free_ports, a.timeout)
        elif a.action == "down":
            return 1 if down(a.home, volumes=a.volumes) else 0
        elif a.action == "status":
            rows = status(a.home)
            if a.json:
                print(json.dumps(rows, indent=2))
            else:
                for r in rows:
                    print(f"{r['service']:22} {r['state']:9} pid={r['pid'] or '-':<8} "
                          f"port={r['port'] or '-':<6} {r['log']}")
            return 0 if all(r["state"] in ("up", "done") for r in rows) else 3
        elif a.action in ("kill", "start"):
            if not a.service:
                ap.error(f"{a.action} needs a SERVICE")
            c = Cluster.load(a.home.resolve())
            if a.service not in c.services:
                ap.error(f"unknown service {a.service!r}; one of {', '.join(c.services)}")
            if a.action == "kill":
                print(f"{a.service}: pid {c.kill(a.service, getattr(signal, 'SIG' + a.signal))}")
            else:
                c.start(a.service, a.timeout)
                print(f"{a.service}: started, pid {c.services[a.service].pid}")
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
