"""A Spark standalone master and worker on 127.0.0.1, started from the pyspark distribution
(spark-class), for real cluster-mode tests."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyspark

from bench.harness.s3server import free_port

SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    master_url: str
    ui_url: str
    procs: list[subprocess.Popen]

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as r:  # noqa: S310
            return json.load(r)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def start_cluster(logdir: Path) -> StandaloneCluster:
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(logdir / "work")}
    port, ui, wui = free_port(), free_port(), free_port()
    cls = str(SPARK_HOME / "bin/spark-class")
    master = subprocess.Popen(
        [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
         str(port), "--webui-port", str(ui)], env=env,
        stdout=open(logdir / "master.log", "wb"), stderr=subprocess.STDOUT)
    worker = subprocess.Popen(
        [cls, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
         "--host", "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port", str(wui)],
        env=env, stdout=open(logdir / "worker.log", "wb"), stderr=subprocess.STDOUT)
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}",
                                [master, worker])
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if any(w.get("state") == "ALIVE" for w in cluster.state().get("workers", [])):
                return cluster
        except OSError:
            pass
        time.sleep(1)
    cluster.stop()
    raise RuntimeError(f"standalone cluster did not come up; see {logdir}/master.log")
