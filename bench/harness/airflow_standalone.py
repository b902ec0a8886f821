"""A real `airflow standalone` (scheduler, api-server, dag-processor, triggerer; SQLite;
SimpleAuthManager) on a free port of 127.0.0.1, with users `admin` and `viewer` whose
passwords the tests know, and the project's dags/ and plugins/."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

from bench.harness.airflow_env import AIRFLOW, ROOT, airflow_env
from spark_jobs.runtime.processes import free_port

PASSWORDS = {"admin": "admin-pw", "viewer": "viewer-pw"}


def connect_env(server: Any) -> dict[str, str]:
    """Settings that run a DAG's checkpointed tasks on the Spark Connect server ``server``
    (through the Spark provider's ``spark_connect`` connection, as a deployment would)."""
    return {"CKPT_SPARK_MODE": "connect",
            "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
                {"conn_type": "spark_connect", "host": server.host, "port": server.port})}


class Standalone:
    def __init__(self, home: Path, command: tuple[str, ...] = ("standalone",), prefix: str = "",
                 ready_dag: str = "flights_daily", preload: bool = True, **env: Any):
        self.home = home
        self.ready_dag = ready_dag  # start() waits until the api-server knows this DAG
        self.command = command  # ("api-server",): Airflow's REST API alone
        self.port = free_port()
        # prefix: a path in [api] base_url (Airflow behind a proxy at https://host/airflow)
        self.url = f"http://127.0.0.1:{self.port}{prefix}"
        home.mkdir(parents=True, exist_ok=True)
        pw_file = home / "passwords.json"
        pw_file.write_text(json.dumps(PASSWORDS))
        self.env = airflow_env(
            home, preload,
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__BASE_URL=self.url,
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.url}/execution/",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin,viewer:viewer",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(pw_file),
            AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="2",
            AIRFLOW__API__WORKERS="1",
            # Free ports for the log servers too: two test modules may run a standalone each.
            AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
            # standalone starts its components as `airflow ...` from PATH
            PATH=f"{Path(AIRFLOW).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            **env,
        )
        self.proc: subprocess.Popen | None = None
        self._tokens: dict[str, str] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 600) -> Standalone:
        # A hang guard, not a speed check: alone on 2 cores the deployment answers in about a
        # minute, but beside two other modules' deployments and JVMs on a busy host its API
        # server was still importing after 240 s.
        self.log = open(self.home / "standalone.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen([AIRFLOW, *self.command], env=self.env, cwd=ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airflow standalone exited: {self.tail()}")
            if "Traceback" in self.tail(100_000) and "FileNotFoundError" in self.tail(100_000):
                raise RuntimeError(f"airflow standalone cannot start a component: {self.tail()}")
            try:
                if requests.get(f"{self.url}/api/v2/monitor/health", timeout=2).ok:
                    r = self.get(f"/api/v2/dags/{self.ready_dag}", "admin")
                    if r.status_code == 200:
                        return self
            except requests.RequestException:
                pass
            time.sleep(2)
        raise RuntimeError(f"airflow standalone not ready in {timeout}s: {self.tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        # What of its group outlived it (two idle LocalExecutor workers did once, orphaned
        # for the rest of the suite) goes too.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()

    def wait_for(self, pred: Any, timeout: float, what: str, why: Any = None) -> Any:
        """``pred()``'s first true value, asked every 0.5 s; after ``timeout`` an
        AssertionError naming ``what`` with ``why()`` (default: the log's tail)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = pred()
            if value:
                return value
            time.sleep(0.5)
        raise AssertionError(f"{what} not within {timeout}s\n{why() if why else self.tail()}")

    def tail(self, n: int = 4000) -> str:
        p = self.home / "standalone.log"
        return p.read_text(errors="replace")[-n:] if p.exists() else ""

    # ------------------------------------------------------------------ REST
    def token(self, user: str) -> str:
        if user not in self._tokens:
            r = requests.post(f"{self.url}/auth/token",
                              json={"username": user, "password": PASSWORDS[user]}, timeout=10)
            r.raise_for_status()
            self._tokens[user] = r.json()["access_token"]
        return self._tokens[user]

    def _headers(self, user: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(user)}"} if user else {}

    def get(self, path: str, user: str | None = "admin", headers: dict | None = None,
            **kw: Any) -> requests.Response:
        """A read, asked again (twice at most) when the API server took more than 30 s to
        answer: with three test modules on two cores its workers wait for CPU, and a
        read is safe to repeat (a user's browser asks again too)."""
        def ask() -> requests.Response:
            return requests.get(f"{self.url}{path}",
                                headers={**self._headers(user), **(headers or {})},
                                timeout=30, **kw)

        for _ in range(2):
            try:
                return ask()
            except requests.exceptions.ReadTimeout:
                pass
        return ask()

    def put(self, path: str, user: str | None = "admin") -> requests.Response:
        return requests.put(f"{self.url}{path}", headers=self._headers(user), timeout=60)

    def post(self, path: str, body: Any, user: str | None = "admin") -> requests.Response:
        return requests.post(f"{self.url}{path}", json=body, headers=self._headers(user),
                             timeout=60)

    def write(self, method: str, path: str, body: Any, user: str = "admin") -> requests.Response:
        """A write to Airflow's REST API, asked again (twice at most) when SQLite refused it:
        Airflow answers a write that waited past the database's busy timeout with a 500
        "Database error", nothing written. A user asks again too."""
        for _ in range(3):
            r = requests.request(method, f"{self.url}{path}", json=body,
                                 headers=self._headers(user), timeout=60)
            if r.status_code != 500 or "Database error" not in r.text:
                break
            time.sleep(2)
        return r

    def trigger(self, dag_id: str, logical_date: str, conf: dict | None = None) -> str:
        r = self.write("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                       {"logical_date": logical_date, "conf": conf or {}})
        assert r.status_code == 200, r.text
        return r.json()["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        r = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        r.raise_for_status()
        return r.json()["state"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 600) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                state = self.run_state(dag_id, run_id)
            except requests.exceptions.ReadTimeout:
                # An api-server starved of CPU (two cores shared with other test modules)
                # answered no poll within 30 s: the run goes on, so does the wait.
                continue
            if state in ("success", "failed"):
                return state
            time.sleep(3)
        raise TimeoutError(f"run {run_id} still not finished after {timeout}s")

    def diagnose(self, dag_id: str, run_id: str, lines: int = 12) -> str:
        """What a failed wait needs to be understood: the run's state, each task's state and
        try, the warnings and errors of each task's tries (its logs, through the REST API),
        and the scheduler's lines about the run; never raises."""
        out = []
        try:
            out.append(f"run {run_id}: {self.run_state(dag_id, run_id)}")
            for task, (state, tries) in sorted(self.task_tries(dag_id, run_id).items()):
                out.append(f"  {task}: {state} (try {tries})")
                for n in range(1, max(tries, 1) + 1):
                    r = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                                 f"{task}/logs/{n}", params={"full_content": "true"},
                                 headers={"Accept": "application/json"})
                    events = [e for e in (r.json().get("content") or []) if isinstance(e, dict)
                              and e.get("level") in ("warning", "error", "critical")] \
                        if r.ok else []
                    out += [f"    try {n} {e.get('timestamp', '')} {e.get('level')}: "
                            f"{str(e.get('event'))[:300]}" for e in events[-lines:]]
        except Exception as exc:  # noqa: BLE001 - a diagnosis never hides the failure
            out.append(f"(diagnosis incomplete: {type(exc).__name__}: {exc})")
        log = self.tail(2_000_000).splitlines()
        out += [x[:400] for x in log if "scheduler" in x[:20] and (run_id in x or "deadlock" in x
                                                                  or "mismatch" in x)][-lines:]
        return "\n".join(out)

    def task_tries(self, dag_id: str, run_id: str) -> dict[str, tuple[str, int]]:
        r = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        r.raise_for_status()
        return {t["task_id"]: (t["state"], t["try_number"]) for t in r.json()["task_instances"]}
