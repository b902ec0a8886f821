"""scripts/cluster.py against docker/docker-compose.yml, without starting anything: the
compose file drives every service's command and environment, so that what runs here as
processes is the deployment users run in containers."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from scripts.cluster import (
    CONTAINER_PORTS,
    ORDER,
    ROOT,
    Ports,
    build,
    load_compose,
    replicas,
    rewrite,
)


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module", params=[False, True], ids=["compose-ports", "free-ports"])
def cluster(request, compose, tmp_path_factory):
    return build(compose, tmp_path_factory.mktemp("home"),
                 Ports.allocate(compose, free=request.param), {"X_DRILL": "1"})


def test_every_compose_service_runs_as_a_process(compose, cluster):
    want = set()
    for name in compose["services"]:
        n = replicas(compose, name)
        want |= {name} if n == 1 else {f"{name}-{i + 1}" for i in range(n)}
    assert set(cluster.services) == want
    assert replicas(compose, "airflow-worker") == 2
    # Started in dependency order: every service after what it depends on.
    order = [n.rsplit("-", 1)[0] if n.startswith("airflow-worker-") else n
             for n in cluster.services]
    assert order == [n for n in ORDER for _ in range(replicas(compose, n))]
    for name, svc in compose["services"].items():
        for dep in svc.get("depends_on") or {}:
            assert ORDER.index(dep) < ORDER.index(name), (name, dep)


def test_airflow_processes_get_the_compose_environment(compose, cluster):
    common = compose["x-airflow-common"]["environment"]
    hosts = "|".join(re.escape(h) for h in CONTAINER_PORTS)
    for name, svc in cluster.services.items():
        if not name.startswith("airflow-"):
            continue
        assert set(common) <= set(svc.env), name
        assert svc.env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        assert svc.env["X_DRILL"] == "1"
        for key in common:
            value = svc.env[key]
            assert "/opt/" not in value, (key, value)
            assert not re.search(rf"[/@\"]({hosts})[:/\"]", value), (key, value)
    env = cluster.services["airflow-scheduler"].env
    pg = cluster.ports.of("postgres", "db")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == \
        f"postgresql+psycopg2://airflow:airflow@127.0.0.1:{pg}/airflow"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == \
        f"redis://127.0.0.1:{cluster.ports.of('redis', 'redis')}/0"
    assert env["AWS_ENDPOINT_URL"] == cluster.s3_endpoint
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"{cluster.api_url}/execution/"
    assert json.loads(env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]) == {
        "conn_type": "spark_connect", "host": "127.0.0.1",
        "port": cluster.ports.of("spark-connect", "grpc")}
    assert json.loads(env["AIRFLOW_CONN_SPARK_CLUSTER"])["host"] == \
        f"spark://127.0.0.1:{cluster.ports.of('spark-master', 'master')}"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(ROOT / "dags")
    # Two workers on one host: each its own Celery name and log server port.
    w1, w2 = (cluster.services[f"airflow-worker-{i}"] for i in (1, 2))
    assert w1.env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] != \
        w2.env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"]
    assert w1.cmd[-1] != w2.cmd[-1] and w1.cmd[1:4] == ["celery", "worker", "--celery-hostname"]


def test_service_commands_follow_the_compose_commands(compose, cluster):
    s = cluster.services
    assert s["spark-master"].cmd[1] == "org.apache.spark.deploy.master.Master"
    assert s["spark-worker"].cmd[1:3] == [
        "org.apache.spark.deploy.worker.Worker",
        f"spark://127.0.0.1:{cluster.ports.of('spark-master', 'master')}"]
    assert s["spark-worker"].cmd[3:7] == ["--cores", "2", "--memory", "2g"]  # as in compose
    connect = s["spark-connect"].cmd
    assert connect[1:5] == ["-m", "spark_jobs.runtime.connect_server", "run", "--host"]
    assert f"spark://127.0.0.1:{cluster.ports.of('spark-master', 'master')}" in connect
    assert cluster.s3_endpoint in connect
    assert s["airflow-apiserver"].cmd[1:] == [
        "api-server", "--port", str(cluster.ports.of("airflow-apiserver", "http"))]
    for name in ("scheduler", "dag-processor", "triggerer"):
        assert s[f"airflow-{name}"].cmd[1:] == compose["services"][f"airflow-{name}"][
            "command"][1:]
    assert s["airflow-init"].cmd[1] == str(ROOT / "docker" / "airflow-init.sh")
    assert s["minio"].env["MINIO_ROOT_USER"] == "minioadmin"
    ports = [p for k, p in cluster.ports.by_key.items()]
    assert len(ports) == len(set(ports))


def test_rewrite_maps_hosts_and_refuses_unmapped_ports(compose):
    ports = Ports.allocate(compose, free=True)
    assert rewrite("redis://redis:6379/0", ports) == \
        f"redis://127.0.0.1:{ports.of('redis', 'redis')}/0"
    assert rewrite("http://minio:9000", ports) == f"http://127.0.0.1:{ports.of('minio', 'api')}"
    assert rewrite("s3://checkpoints/", ports) == "s3://checkpoints/"  # a bucket, not a host
    with pytest.raises(RuntimeError, match="does not map"):
        rewrite("http://minio:1234", ports)


def test_down_stops_only_its_own_process_groups(tmp_path):
    """`leftover` looks at the recorded groups only; a cluster that never started any has
    nothing left behind, and a missing home is a one-line error."""
    from scripts.cluster import Cluster, ClusterError, Service, main

    c = Cluster(tmp_path, Ports({"x.y": 1}), {"redis": Service("redis", ["true"], {}, "l")})
    assert c.leftover() == []
    with pytest.raises(ClusterError, match="nothing was started"):
        Cluster.load(tmp_path / "nowhere")
    assert main(["status", "--home", str(tmp_path / "nowhere")]) == 1


def test_cluster_sh_wraps_the_python_script():
    sh = ROOT / "scripts" / "cluster.sh"
    assert "scripts/cluster.py" in sh.read_text() and sh.stat().st_mode & 0o111


def test_down_stops_a_service_with_its_children_and_deletes_volumes(tmp_path):
    """A service's whole process group goes (a container's children die with it), and
    `down --volumes` deletes the data directories."""

    from scripts.cluster import Cluster, Service, down
    from spark_jobs.runtime.processes import process_groups

    (tmp_path / "logs").mkdir()
    (tmp_path / "minio").mkdir()
    svc = Service("redis", ["sh", "-c", "sleep 300 & sleep 300; wait"], {"PATH": "/usr/bin:/bin"},
                  str(tmp_path / "logs" / "redis.log"))
    c = Cluster(tmp_path, Ports({}), {"redis": svc})
    c.save()
    c.start("redis", timeout=10)
    group = c.services["redis"].pid
    deadline = time.monotonic() + 10
    while len([p for p, g in process_groups() if g == group]) < 3:  # sh and its sleeps
        assert time.monotonic() < deadline, "the service's children did not start"
        time.sleep(0.05)
    assert down(tmp_path, log=lambda *a, **k: None, volumes=True) == []
    assert [p for p, g in process_groups() if g == group] == []
    assert not (tmp_path / "minio").exists() and (tmp_path / "logs").exists()


def test_kill_takes_descendants_that_left_the_group(tmp_path):
    """`kill` is a container's death: a descendant in a session of its own (as Airflow's
    task processes are) dies with its service, not only the service's process group."""
    from scripts.cluster import Cluster, Service
    from spark_jobs.runtime.processes import descendants

    (tmp_path / "logs").mkdir()
    svc = Service("redis", ["sh", "-c", "setsid sleep 300 & sleep 300; wait"],
                  {"PATH": "/usr/bin:/bin"}, str(tmp_path / "logs" / "redis.log"))
    c = Cluster(tmp_path, Ports({}), {"redis": svc})
    c.save()
    c.start("redis", timeout=10)
    pid = c.services["redis"].pid
    deadline = time.monotonic() + 10
    # Both sleeps, one in a session of its own. A forked child calls setsid() a moment
    # after it appears, so the wait is for the session, not only for the two children.
    while not _left_session(tree := descendants(pid)) or len(tree) < 2:
        assert time.monotonic() < deadline, f"no child left the session: {tree}"
        time.sleep(0.05)
    c.kill("redis")
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in tree):
        assert time.monotonic() < deadline, f"left alive: {[p for p in tree if _alive(p)]}"
        time.sleep(0.05)


def _left_session(pids) -> bool:
    def leader(p: int) -> bool:
        try:
            return os.getsid(p) == p
        except OSError:
            return False
    return any(leader(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
