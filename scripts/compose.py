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
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
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

    def __init__(self, local: bool = False, env: dict[str, str] | None = None):
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
        self.env = {**os.environ, **(env or {})}
        self.spec = yaml.safe_load(COMPOSE.read_text())

    def run(self, *args: str, check: bool = True, timeout: float = 3600
            ) -> subprocess.CompletedProcess:
        r = subprocess.run([*self.cmd, *args], cwd=ROOT, env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        if check and r.returncode:
            tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
            raise ComposeError(f"compose {' '.join(args)} failed: " + " | ".join(tail))
        return r

    # -- lifecycle -------------------------------------------------------------------
    def up(self, timeout: float = 900) -> None:
        self.run("up", "-d")
        self.wait_healthy(timeout)

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

    def wait_healthy(self, timeout: float) -> None:
        """Every long-running container healthy, the one-off ones exited 0."""
        deadline = time.monotonic() + timeout
        while True:
            cs = self.containers()
            waiting = [n for n, c in cs.items()
                       if not (c["health"] == "healthy" or
                               (c["state"] == "exited" and c["service"] in
                                ("minio-init", "airflow-init")))]
            failed = [n for n, c in cs.items() if c["state"] == "exited" and
                      c["service"] not in ("minio-init", "airflow-init")]
            if cs and not waiting:
                return
            if failed or time.monotonic() > deadline:
                logs = {n: self.logs(n, 5) for n in (failed or waiting)[:3]}
                raise ComposeError(f"compose: not healthy: {failed or waiting}: {logs}")
            time.sleep(5)

    def logs(self, container: str, lines: int = 50) -> str:
        return subprocess.run([self.engine, "logs", "--tail", str(lines), container],
                              capture_output=True, text=True).stdout[-3000:]

    # -- what bench/drills.py reads of a cluster ------------------------------------------
    def kill(self, container: str, sig: int = 9) -> None:
        """A container's death: SIGKILL to its processes (`podman kill`)."""
        subprocess.run([self.engine, "kill", "-s", str(sig), container], check=True,
                       capture_output=True)

    def start(self, container: str) -> None:
        subprocess.run([self.engine, "start", container], check=True, capture_output=True)

    def airflow_env(self) -> dict[str, str]:
        """The components' environment as a client on this host reaches them: MinIO and
        the api-server at their published ports."""
        env = {k: _default(str(v)) for k, v in
               self.spec["x-airflow-common"]["environment"].items()}
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000"
        return env

    @property
    def api_url(self) -> str:
        return "http://127.0.0.1:8080"


def _default(value: str) -> str:
    """``${VAR:-default}`` as compose resolves it here (the variable, else its default)."""
    import re

    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m[1], m[2]), value)


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
