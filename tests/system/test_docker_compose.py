"""The docker deployment, checked statically and fast: the compose file is parsed and every
build context, mounted path, script, host name, port, health check and credential it relies
on is checked against the repository and against the other services. The deployment is
built and run for real by `make test-containers` (tests/containers/)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services(compose: dict) -> dict[str, dict]:
    return compose["services"]


def test_every_component_of_the_deployment_is_there(compose):
    cmds = {name: svc.get("command") or svc.get("entrypoint") or []
            for name, svc in services(compose).items()}
    joined = {name: " ".join(c) if isinstance(c, list) else str(c) for name, c in cmds.items()}
    for component in ("airflow api-server", "airflow scheduler", "airflow dag-processor",
                      "airflow triggerer", "airflow celery worker",
                      "org.apache.spark.deploy.master.Master",
                      "org.apache.spark.deploy.worker.Worker"):
        assert any(component in c for c in joined.values()), component
    # Each image a variable whose default is the public image (docker/local.env: local ones)
    images = {_default(svc.get("image", "")) for svc in services(compose).values()}
    assert any(i.startswith("postgres:") for i in images)
    assert any(i.startswith("redis:") for i in images)
    assert any(i.startswith("minio/minio:") for i in images)
    assert all(":" in i and not i.endswith(":latest") for i in images if i), images


def test_build_contexts_and_dockerfile_sources_exist(compose):
    for name, svc in services(compose).items():
        build = svc.get("build")
        if not build:
            continue
        context = (DOCKER / build["context"]).resolve()
        assert context.is_dir(), (name, context)
        dockerfile = context / build["dockerfile"]
        assert dockerfile.is_file(), (name, dockerfile)
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY "):
                args = shlex.split(line)[1:]
                if args[0].startswith("--from="):  # from an earlier stage, not the context
                    stage = args[0].removeprefix("--from=")
                    assert f" AS {stage}" in dockerfile.read_text(), line
                    continue
                *sources, _dest = args
                for src in sources:
                    assert (context / src).exists(), f"{dockerfile.name}: COPY {src} is missing"
            if line.startswith("RUN scripts/"):
                assert (context / line.split()[1]).is_file(), line


def test_mounted_paths_and_named_volumes_exist(compose):
    declared = set(compose.get("volumes") or {})
    for name, svc in services(compose).items():
        for vol in svc.get("volumes") or []:
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (DOCKER / src).exists(), f"{name}: mounts missing {src}"
            else:
                assert src in declared, f"{name}: volume {src} is not declared"


def test_dependencies_and_commands_refer_to_what_exists(compose):
    svcs = services(compose)
    for name, svc in svcs.items():
        deps = svc.get("depends_on") or {}
        for dep in deps:
            assert dep in svcs, f"{name} depends on unknown service {dep}"
        entry = svc.get("entrypoint") or []
        for part in entry:
            if part.startswith("/opt/") and part.endswith(".sh"):
                mounted = [v.split(":")[1] for v in svc.get("volumes") or []]
                assert part in mounted, f"{name}: entrypoint {part} is not mounted"


def _env(compose: dict, service: str) -> dict[str, str]:
    return {k: str(v) for k, v in (services(compose)[service].get("environment") or {}).items()}


def _default(value: str) -> str:
    """``${VAR:-default}`` -> default (what a plain `docker compose up` uses)."""
    m = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
    return m.group(1) if m else value


def test_services_agree_on_hosts_ports_buckets_and_credentials(compose):
    svcs = services(compose)
    env = _env(compose, "airflow-scheduler")
    # The same environment for every Airflow component.
    for name in ("airflow-apiserver", "airflow-dag-processor", "airflow-triggerer",
                 "airflow-worker", "airflow-init"):
        assert _env(compose, name) == env, name

    # Keys every component must share, not make its own: the API's tokens and the
    # api-server's signed requests for task logs to the workers' log servers.
    assert env.get("AIRFLOW__API_AUTH__JWT_SECRET") and env.get("AIRFLOW__API__SECRET_KEY")

    db = urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    pg = _env(compose, "postgres")
    assert db.hostname in svcs and _default(svcs[db.hostname]["image"]).startswith("postgres")
    assert (db.username, db.password, db.path.strip("/")) == \
        (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])
    broker = urlparse(env["AIRFLOW__CELERY__BROKER_URL"])
    assert broker.hostname in svcs and _default(svcs[broker.hostname]["image"]).startswith("redis")

    api = urlparse(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert api.hostname == "airflow-apiserver"
    assert str(api.port) in svcs["airflow-apiserver"]["command"]

    s3 = urlparse(env["AWS_ENDPOINT_URL"])
    minio = _env(compose, "minio")
    assert s3.hostname in svcs and s3.port == 9000
    assert _default(env["AWS_ACCESS_KEY_ID"]) == _default(minio["MINIO_ROOT_USER"])
    assert _default(env["AWS_SECRET_ACCESS_KEY"]) == _default(minio["MINIO_ROOT_PASSWORD"])
    # The buckets are made from the same variables the components read.
    assert _env(compose, "minio-init") == env
    init = (DOCKER / "minio_init.py").read_text()
    assert all(var in init for var in ("CKPT_STORAGE", "CKPT_DATA"))

    # Spark's catalog: a metastore database on the deployment's PostgreSQL, created by
    # metastore-init from the same variables, before the Connect server starts.
    meta = urlparse(env["CKPT_METASTORE_URL"].removeprefix("jdbc:"))
    assert (meta.scheme, meta.hostname) == ("postgresql", db.hostname)
    assert (env["CKPT_METASTORE_USER"], env["CKPT_METASTORE_PASSWORD"]) == \
        (db.username, db.password)
    assert _env(compose, "metastore-init") == env
    assert "CKPT_METASTORE_URL" in (DOCKER / "metastore_init.py").read_text()
    assert "metastore-init" in svcs["spark-connect"]["depends_on"]

    import json

    conn = json.loads(env["AIRFLOW_CONN_SPARK_CLUSTER"])
    assert env["CKPT_SPARK_CONN_ID"] == "spark_cluster"
    master = urlparse(conn["host"])
    assert master.hostname == "spark-master"
    assert f"--port {master.port}" in " ".join(svcs["spark-master"]["command"])
    assert conn["host"] in " ".join(svcs["spark-worker"]["command"])
    # Tasks are clients of the Spark Connect service, whose driver uses that cluster.
    assert env["CKPT_SPARK_MODE"] == "connect"
    sc = json.loads(env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
    assert sc["conn_type"] == "spark_connect" and sc["host"] in svcs
    connect_cmd = svcs[sc["host"]]["command"]
    assert connect_cmd[:3] == ["python", "-m", "spark_jobs.runtime.connect_server"]
    assert connect_cmd[connect_cmd.index("--port") + 1] == str(sc["port"])
    assert connect_cmd[connect_cmd.index("--master") + 1] == conn["host"]
    assert connect_cmd[connect_cmd.index("--s3-endpoint") + 1] == env["AWS_ENDPOINT_URL"]

    # What the images run from the project exists in it.
    assert (ROOT / env["AIRFLOW__CORE__DAGS_FOLDER"].replace("/opt/dag-checkpoints/", "")
            / "flights_daily.py").is_file()
    assert (ROOT / "plugins" / "dag_checkpoints_plugin.py").is_file()


@pytest.mark.slow
def test_docker_requirements_resolve_with_the_project_pins():
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                        "-r", str(ROOT / "requirements.txt"),
                        "-r", str(DOCKER / "requirements-docker.txt")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


def test_every_long_running_service_has_a_health_check(compose):
    one_off = {"minio-init", "metastore-init", "airflow-init"}
    for name, svc in services(compose).items():
        if name not in one_off:
            assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"


def test_local_env_names_an_image_for_every_variable(compose):
    """docker/local.env (scripts/container_images.sh's images) covers each image variable."""
    text = COMPOSE.read_text()
    used = set(re.findall(r"\$\{(\w+_IMAGE):-", text))
    local = dict(line.split("=", 1) for line in (DOCKER / "local.env").read_text().splitlines()
                 if line and not line.startswith("#"))
    assert used and used <= set(local), used - set(local)


def test_the_base_image_is_a_build_argument_with_the_users_default():
    """A host without a registry builds on a local base; users keep python:3.11-slim."""
    text = (DOCKER / "Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms and all(f == "${PYTHON_IMAGE}" for f in froms), froms


def test_no_container_engine_is_one_line_naming_what_to_install(tmp_path):
    """`scripts/containers.sh check` on a host with neither podman nor docker."""
    r = subprocess.run(["/bin/bash", str(ROOT / "scripts/containers.sh"), "check"],
                       capture_output=True, text=True, timeout=60,
                       env={"PATH": str(tmp_path)})  # an empty PATH: no engine on it
    assert r.returncode == 2 and r.stdout == ""
    [line] = r.stderr.splitlines()
    assert line.startswith("containers: no container engine: install podman")
