"""A Spark Connect server on this machine, for development, tests and the demo: pyspark's
own server class (what ``sbin/start-connect-server.sh`` starts), with the S3A connector
when its jars are installed (scripts/install_spark_s3.sh).

    python -m spark_jobs.runtime.connect_server start [--port 15002] [--master local[2]]
    python -m spark_jobs.runtime.connect_server status|stop [--port 15002]

``start`` runs the server in the background (pid and log under ``.tools/run/``) and returns
when it accepts sessions; ``run`` keeps it in the foreground. S3 credentials are the
server's (the standard AWS chain of its environment): a client never sends them. On a
cluster, point the Airflow connection ``spark_connect_default`` at the cluster's own server.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .metastore_schema import ensure_schema
from .processes import free_port, listening, stop_group, tail
from .spark_conf import (
    LOCAL_CONF,
    LOG4J_CONF,
    SERVER_CONF,
    is_secret_key,
    lakehouse_conf,
    metastore_conf,
    s3a_conf,
    spark_jars,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_CLONE = Path(__file__).resolve().parents[2]
#: The server's pid, log and warehouse: a clone's .tools/run; for an installed package
#: (site-packages is no place to write) the user's cache, or CKPT_RUN_DIR.
RUN_DIR = Path(os.environ.get("CKPT_RUN_DIR") or (
    _CLONE / ".tools" / "run" if (_CLONE / "pyproject.toml").is_file()
    else Path.home() / ".cache" / "dag-checkpoints" / "run"))
DEFAULT_PORT = 15002
log = logging.getLogger(__name__)


def spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


@dataclass
class ConnectServer:
    """One Spark Connect server process bound to ``host:port``."""

    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    master: str = "local[2]"
    #: S3-compatible endpoint the server's S3A connector uses by default (clients may set
    #: their own per session)
    s3_endpoint: str | None = None
    driver_memory: str = "2g"
    conf: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    #: where managed tables go (Declarative Pipelines' materialized views, say); default
    #: .tools/run/spark-warehouse-<port>, not the working directory
    warehouse: Path | None = None
    #: environment of the server beyond this process's (e.g. its S3 credentials)
    extra_env: dict[str, str] = field(default_factory=dict)
    #: the session catalog's metastore (JDBC URL); default CKPT_METASTORE_URL
    metastore: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = field(default=False, init=False)

    @property
    def log_file(self) -> Path:
        """Where the server logs: ``log_path``, else a file of its port under RUN_DIR."""
        return self.log_path or RUN_DIR / f"spark-connect-{self.port}.log"

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    def command(self) -> list[str]:
        conf = {"spark.connect.grpc.binding.address": self.host,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.ui.showConsoleProgress": "false",
                # An operation whose client died stays running this long for a retry to
                # reattach to (PROTOCOL 6.3): Airflow notices a killed task after its
                # heartbeat timeout, then waits its retry_delay (the default is 5 min).
                "spark.connect.execute.manager.detachedTimeout": "900s",
                "spark.sql.warehouse.dir": str(self.warehouse or
                                               RUN_DIR / f"spark-warehouse-{self.port}"),
                "spark.driver.extraJavaOptions":
                    f"-Dlog4j.configurationFile={LOG4J_CONF} -Dlog4j2.level=WARN"
                    # A JVM crash report beside the server's log, not in whatever directory
                    # the server was started from (a repository, a DAG folder).
                    f" -XX:ErrorFile={self.log_file.parent}/hs_err_pid%p.log"}
        conf.update(SERVER_CONF)
        if self.master.startswith("local"):
            conf.update(LOCAL_CONF)  # a laptop's; a cluster's settings stand
        jars = spark_jars()
        if jars:
            conf.update(s3a_conf(self.s3_endpoint))
        conf.update(lakehouse_conf(jars))
        conf.update(self.conf)
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS,
               "--name", f"Spark Connect {self.host}:{self.port}", "--master", self.master,
               "--driver-memory", self.driver_memory]
        if jars:
            cmd += ["--jars", ",".join(str(j) for j in jars)]
        catalog = metastore_conf(self.metastore)
        catalog.update({k: v for k, v in conf.items() if is_secret_key(k)})
        conf = {k: v for k, v in conf.items() if not is_secret_key(k)}
        if catalog:
            # In a file only this user reads, not on the command line (the metastore's or
            # an Iceberg catalog's password would show in every process listing).
            props = self.log_file.parent / f"metastore-{self.port}.properties"
            props.parent.mkdir(parents=True, exist_ok=True)
            props.touch(mode=0o600)
            props.chmod(0o600)
            props.write_text("".join(f"{k}={v}\n" for k, v in catalog.items()))
            cmd += ["--properties-file", str(props)]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        return cmd

    def env(self) -> dict[str, str]:
        root = str(Path(__file__).resolve().parents[2])
        local = {"SPARK_LOCAL_IP": "127.0.0.1"} if self.host in ("127.0.0.1", "localhost") \
            else {}  # else the host's own address, which executors elsewhere can reach
        return {**os.environ, **local,
                # Python UDFs run in workers of the server's: this interpreter, this code
                "PYSPARK_PYTHON": sys.executable,
                "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH"))
                                              if p),
                **self.extra_env}

    def start(self, timeout: float = 180.0) -> ConnectServer:
        """Start the server and wait until it accepts connections. ``port=0`` picks a free
        port, and another one if a different process takes it before the JVM binds it
        (a free port is only free until someone binds it: busy test machines race)."""
        auto = self.port == 0
        for _ in range(3 if auto else 1):
            if auto:
                self.port = free_port(self.host)
            if self._launch(timeout, refuse_busy=not auto):
                return self
        raise RuntimeError(f"Spark Connect server could not bind a port on {self.host}: "
                           f"{tail(self.log_path)}")

    def _launch(self, timeout: float, refuse_busy: bool) -> bool:
        """Run the server; True once it listens, False when its port was taken first."""
        if refuse_busy and listening(self.port, self.host):
            raise RuntimeError(f"port {self.port} is busy on {self.host}: a Spark Connect "
                               "server (or something else) already listens there")
        log_path = self.log_file
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # A PostgreSQL metastore's tables, before the server's catalog first needs them
        # (created lazily, the first CREATE TABLE there deadlocks: metastore_schema).
        ensure_schema(self.metastore)
        self.stopped = False
        with open(log_path, "w") as out:
            self.proc = subprocess.Popen(self.command(), env=self.env(), stdout=out,  # noqa: S603
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.log_path = log_path
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "Failed to bind" in tail(log_path, 20_000):
                    return False
                raise RuntimeError(f"Spark Connect server exited ({self.proc.returncode}): "
                                   f"{tail(log_path)}")
            # Listening is not enough: the port must be this server's, not a process that
            # took it in the meantime (the server then dies of a BindException).
            if listening(self.port, self.host) and _owns_port(self.proc.pid, self.port):
                return True
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Spark Connect server not listening on {self.url} within "
                           f"{timeout:g}s: {tail(log_path)}")

    def exited(self) -> str | None:
        """None while the server runs; else how it ended, with its log's last lines (a
        script that owns the server names the cause, not just its client's error)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"Spark Connect server exited ({self.proc.returncode}): {tail(self.log_path)}"

    def session(self, app: str, **kwargs: Any) -> Any:
        """A Spark Connect session on this server whose client retries only while the
        server's process runs.

        The client's default retries (about ten minutes per request) ride out a restart of
        a server someone else runs. This one is the caller's own child: once it has exited
        nothing will answer, and a request retried for ten minutes (then the next one, and
        the session's release at the end) would hold a script for most of an hour instead
        of failing. ``kwargs`` are :func:`spark_session`'s."""
        from .session import spark_session

        spark = spark_session(app, remote=self.url, **kwargs)
        proc = self.proc
        if proc is not None:
            spark.client.set_retry_policies([_while_running(proc)])
        return spark

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (its whole process group: the JVM and its Python workers). A
        server found already exited is named with its log's last lines: whatever failed
        in its clients meanwhile was this."""
        if self.proc is None or self.stopped:
            return
        self.stopped = True
        ended = self.exited()
        if ended is not None:
            log.warning("%s", ended)
            return
        stop_group(self.proc.pid, timeout, self.proc)
        self.proc.wait(timeout)


def _while_running(proc: subprocess.Popen[bytes]) -> Any:
    """pyspark's default retry policy of a Connect client, which gives up once the server
    process ``proc`` has exited (pyspark asks ``can_retry`` before each wait)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class WhileRunning(DefaultPolicy):  # type: ignore[misc]
        def can_retry(self, exception: BaseException) -> bool:
            return proc.poll() is None and bool(super().can_retry(exception))

    return WhileRunning()


def _owns_port(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``port`` (Linux: the socket's
    inode in /proc/net/tcp among the process's descriptors). True where /proc cannot say."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return not Path("/proc/net/tcp").exists()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return True  # another user's process: cannot look, trust the listener
    for fd in fds:
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:
            continue
    return False


def _pid_file(port: int) -> Path:
    return RUN_DIR / f"spark-connect-{port}.pid"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="connect_server", description="A local Spark Connect "
                                 "server for checkpointed jobs (start, stop, status, run).")
    ap.add_argument("action", choices=("start", "stop", "status", "run"))
    ap.add_argument("--port", type=int, default=DEFAULT_PORT)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--master", default="local[2]", help="local[N] or a cluster's master URL")
    ap.add_argument("--s3-endpoint", default=os.environ.get("AWS_ENDPOINT_URL"),
                    help="S3-compatible endpoint for the S3A connector (e.g. MinIO)")
    ap.add_argument("--driver-memory", default="2g")
    a = ap.parse_args(argv)
    pid_file = _pid_file(a.port)
    if a.action in ("stop", "status"):
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        alive = pid is not None and _alive(pid)
        if a.action == "status":
            print(f"sc://{a.host}:{a.port}: " + ("running" if listening(a.port, a.host)
                                                 else "not listening")
                  + (f" (pid {pid})" if alive else ""))
            return 0 if listening(a.port, a.host) else 1
        if pid is not None and alive:
            stop_group(pid, 30.0)
        pid_file.unlink(missing_ok=True)
        print(f"sc://{a.host}:{a.port}: stopped" if alive else
              f"sc://{a.host}:{a.port}: no server of ours was running")
        return 0
    server = ConnectServer(a.port, a.host, a.master, a.s3_endpoint, a.driver_memory)
    try:
        server.start()
    except RuntimeError as exc:
        print(f"connect_server: {exc}", file=sys.stderr)
        return 1
    proc = server.proc
    if proc is None:  # start() returned without a process: it raises instead
        return 1
    if a.action == "start":
        pid_file.write_text(str(proc.pid))
        print(f"Spark Connect server listening on {server.url} (pid {proc.pid}, "
              f"log {server.log_path})")
        return 0
    print(f"Spark Connect server listening on {server.url}; Ctrl-C stops it")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: server.stop())
    try:
        proc.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


if __name__ == "__main__":
    sys.exit(main())
