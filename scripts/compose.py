"""The compose deployment in containers, driven from this host: `podman-compose` (or
`docker compose`) up and down, a service's container killed and started again, and what a
client on this host needs to reach it (the published ports). It offers what bench/drills.py
reads of a process cluster (``airflow_env``, ``api_url``, ``kill``, ``start``), so the same
drills run against containers.

    python scripts/compose.py up|down|status [--local]

``--local``: docker/local.env's images (scripts/container_images.sh), for a host that
reaches no container registry.
"""

# The container engine and compose tool are run with arguments built here, never from input.
# ruff: noqa: S603
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the project's modules are importable
    sys.path.insert(0, str(ROOT))

from scripts.cluster import _subst_vars  # noqa: E402 (compose's variable rules, one place)

COMPOSE = ROOT / "docker" / "docker-compose.yml"
LOCAL_ENV = ROOT / "docker" / "local.env"
PROJECT = "dag-checkpoints"


class ComposeError(RuntimeError):
    pass


def _engine() -> str:
    r = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "containers.sh"), "check"],
                       capture_output=True, text=True)
    if r.returncode:
        raise ComposeError(r.stderr.strip())
    return r.stdout.strip()


class Compose:
    """The deployment of docker/docker-compose.yml, project ``dag-checkpoints``."""

    def __init__(self, local: bool = False, env: dict[str, str] | None = None,
                 airflow_env: dict[str, str] | None = None):
        """``airflow_env``: added to every Airflow component's environment (the drills'
        settings), through an override file next to the compose file's."""
        self.engine = _engine()
        if self.engine == "podman":
            tool = shutil.which("podman-compose") or str(Path(sys.executable).parent /
                                                          "podman-compose")
            if not Path(tool).exists():
                raise ComposeError("compose: podman-compose is not installed "
                                   "(pip install podman-compose==1.5.0)")
            self.cmd = [tool]
        else:
            self.cmd = ["docker", "compose"]
        if local:  # the images' variables (compose's interpolation, not the services')
            self.cmd += ["--env-file", str(LOCAL_ENV)]
        self.cmd += ["-p", PROJECT, "-f", str(COMPOSE)]
        self.spec = yaml.safe_load(COMPOSE.read_text())
        if airflow_env:
            override = {"services": {
                name: {"environment": dict(airflow_env)}
                for name, svc in self.spec["services"].items()
                if svc.get("image") == self.spec["x-airflow-common"]["image"]
                and name.startswith("airflow")}}
            path = Path(tempfile.mkdtemp(prefix="compose-")) / "override.yml"
            path.write_text(yaml.safe_dump(override))
            self.cmd += ["-f", str(path)]
        self.env = {**os.environ, **(env or {})}

    def run(self, *args: str, check: bool = True, timeout: float = 3600
            ) -> subprocess.CompletedProcess:
        r = subprocess.run([*self.cmd, *args], cwd=ROOT, env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        if check and r.returncode:
            tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
            raise ComposeError(f"compose {' '.join(args)} failed: " + " | ".join(tail))
        return r

    # -- lifecycle -------------------------------------------------------------------
    def levels(self) -> list[list[str]]:
        """The services in start order: each after every service it depends on."""
        svcs = self.spec["services"]
        level: dict[str, int] = {}

        def of(name: str) -> int:
            if name not in level:
                deps = svcs[name].get("depends_on") or {}
                level[name] = 1 + max((of(d) for d in deps), default=-1)
            return level[name]

        for name in svcs:
            of(name)
        return [sorted(n for n in svcs if level[n] == i) for i in range(max(level.values()) + 1)]

    def up(self, timeout: float = 900) -> None:
        """Start the services level by level, each level healthy (or, for a one-off service
        without a health check, exited 0) before the next: compose's `service_healthy`
        and `service_completed_successfully`, which podman 4.3 does not enforce."""
        image = self.spec["x-airflow-common"]["image"]
        if subprocess.run([self.engine, "image", "inspect", image],
                          capture_output=True).returncode:
            self.run("build")
        for services in self.levels():
            self.run("up", "-d", "--no-deps", "--no-build", *services)
            self.wait_healthy(timeout, services)

    def down(self) -> list[str]:
        """Stop and remove every container, network and volume of the project; what is
        left of them (nothing, unless something failed)."""
        self.run("down", "-v", "-t", "10", check=False)
        return self.leftovers()

    def leftovers(self) -> list[str]:
        left = []
        label = f"io.podman.compose.project={PROJECT}" if self.engine == "podman" else \
            f"com.docker.compose.project={PROJECT}"
        for kind in ("ps -a", "volume ls", "network ls"):
            r = subprocess.run([self.engine, *kind.split(), "-q", "--filter",
                                f"label={label}"], capture_output=True, text=True)
            left += [f"{kind.split()[0]}:{x}" for x in r.stdout.split()]
        return left

    def containers(self) -> dict[str, dict]:
        """Container name -> {service, state, health, hostname} of the project."""
        r = subprocess.run([self.engine, "ps", "-a", "--format", "json", "--filter",
                            f"label=io.podman.compose.project={PROJECT}"],
                           capture_output=True, text=True, check=True)
        out = {}
        for c in json.loads(r.stdout or "[]"):
            name = c["Names"][0] if isinstance(c["Names"], list) else c["Names"]
            info = json.loads(subprocess.run([self.engine, "inspect", name],
                                             capture_output=True, text=True).stdout)[0]
            health = (info["State"].get("Health") or info["State"].get("Healthcheck")
                      or {}).get("Status", "")
            out[name] = {"service": c.get("Labels", {}).get("com.docker.compose.service", ""),
                         "state": info["State"]["Status"], "health": health,
                         "hostname": info["Config"]["Hostname"]}
        return out

    def one_off(self, service: str) -> bool:
        """A service without a health check runs to completion (an init step)."""
        return "healthcheck" not in self.spec["services"][service]

    def healthy(self, container: str, info: dict) -> bool:
        """The container's health check passes. Podman runs health checks from systemd
        timers, which a host without systemd lacks: it is run here, as the timer would."""
        if self.engine != "podman":
            return info["health"] == "healthy"
        return info["state"] == "running" and subprocess.run(
            [self.engine, "healthcheck", "run", container], capture_output=True).returncode == 0

    def wait_healthy(self, timeout: float, services: list[str] | None = None) -> None:
        """The services' long-running containers healthy, their one-off ones exited 0."""
        deadline = time.monotonic() + timeout
        while True:
            cs = {n: c for n, c in self.containers().items()
                  if services is None or c["service"] in services}
            done: list[str] = []
            failed: list[str] = []
            for n, c in cs.items():
                if self.one_off(c["service"]):
                    if c["state"] == "exited":
                        (done if self.exit_code(n) == 0 else failed).append(n)
                elif c["state"] == "exited":
                    failed.append(n)
                elif self.healthy(n, c):
                    done.append(n)
            if cs and len(done) == len(cs):
                return
            if failed or time.monotonic() > deadline:
                bad = failed or sorted(set(cs) - set(done))
                logs = {n: self.logs(n, 5) for n in bad[:3]}
                raise ComposeError(f"compose: not healthy: {bad}: {logs}")
            time.sleep(3)

    def exit_code(self, container: str) -> int:
        r = subprocess.run([self.engine, "inspect", "--format", "{{.State.ExitCode}}",
                            container], capture_output=True, text=True)
        return int(r.stdout.strip() or -1)

    def logs(self, container: str, lines: int = 50) -> str:
        # the container's stderr too (where a failing init step says why): the engine
        # writes it to its own stderr
        r = subprocess.run([self.engine, "logs", "--tail", str(lines), container],
                           capture_output=True, text=True)
        return (r.stdout + r.stderr)[-3000:]

    # -- what bench/drills.py reads of a cluster ------------------------------------------
    def kill(self, container: str, sig: int = 9) -> None:
        """A container's death: SIGKILL to its processes (`podman kill`). An engine that
        signals no paused container has it unpaused first."""
        r = subprocess.run([self.engine, "kill", "-s", str(sig), container],
                           capture_output=True, text=True)
        if r.returncode != 0 and "paused" in r.stderr.lower():
            self.unpause(container)
            r = subprocess.run([self.engine, "kill", "-s", str(sig), container],
                               capture_output=True, text=True)
        if r.returncode != 0:
            raise ComposeError(f"compose: kill {container}: {r.stderr.strip()[-300:]}")

    def pause(self, container: str) -> None:
        """Freeze every process of a container (its cgroup's freezer)."""
        subprocess.run([self.engine, "pause", container], check=True, capture_output=True)

    def unpause(self, container: str) -> None:
        subprocess.run([self.engine, "unpause", container], check=True, capture_output=True)

    def start(self, container: str, timeout: float = 300) -> None:
        """Start a stopped or killed container and wait until it is healthy again."""
        subprocess.run([self.engine, "start", container], check=True, capture_output=True)
        service = self.containers()[container]["service"]
        if not self.one_off(service):
            self.wait_healthy(timeout, [service])

    def stop(self, container: str, timeout: int = 10) -> None:
        """Stop a container as `compose stop` does: SIGTERM, SIGKILL after ``timeout``."""
        subprocess.run([self.engine, "stop", "-t", str(timeout), container], check=True,
                       capture_output=True)

    def container_of(self, name: str) -> str:
        """``name`` if it is a container of the project, else the one container of
        service ``name``."""
        cs = self.containers()
        if name in cs:
            return name
        own = sorted(n for n, c in cs.items() if c["service"] == name)
        if len(own) != 1:
            raise ComposeError(f"compose: service {name!r} has {len(own)} containers: {own}")
        return own[0]

    def log_lines(self, container: str, since: float | None = None) -> list[str]:
        """What the container logged (since the epoch second ``since``), both streams."""
        after = ["--since", f"{since:.3f}"] if since is not None else []
        r = subprocess.run([self.engine, "logs", *after, container], capture_output=True,
                           text=True, errors="replace")
        return (r.stdout + r.stderr).splitlines()

    def airflow_env(self) -> dict[str, str]:
        """The components' environment as a client on this host reaches them: MinIO and
        the api-server at their published ports."""
        env = {k: _subst_vars(str(v), dict(os.environ)) for k, v in
               self.spec["x-airflow-common"]["environment"].items()}
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000"
        return env

    @property
    def api_url(self) -> str:
        return "http://127.0.0.1:8080"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("up", "down", "status"))
    ap.add_argument("--local", action="store_true", help="docker/local.env's images")
    a = ap.parse_args(argv)
    try:
        c = Compose(local=a.local)
        if a.action == "up":
            c.up()
            print("up: api-server http://127.0.0.1:8080, MinIO http://127.0.0.1:9000")
        elif a.action == "down":
            left = c.down()
            print("down: nothing left" if not left else f"down: left {left}")
            return 1 if left else 0
        else:
            for name, info in sorted(c.containers().items()):
                print(f"{name}: {info['state']} {info['health']}")
    except ComposeError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
