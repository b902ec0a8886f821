"""A real S3-compatible server on 127.0.0.1 for the tests: MinIO when its binary is
available (scripts/install_minio.sh), else moto's server mode. Both honour
If-None-Match: * and If-Match with 412."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import boto3

from spark_jobs.runtime.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY = "ckpt-test-access"
SECRET_KEY = "ckpt-test-secret-key"  # noqa: S105 - a throwaway test server's key


def find_minio() -> str | None:
    for cand in (ROOT / ".tools/bin/minio", shutil.which("minio")):
        if cand and os.access(cand, os.X_OK):
            return str(cand)
    return None


@dataclass
class S3Server:
    kind: str
    endpoint: str
    proc: subprocess.Popen
    datadir: str | None
    #: the server's output: a file, not a pipe, since nobody reads it while the server
    #: runs (moto logs a line per request, and a full pipe stalled it mid-request)
    log: Path | None = None

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.datadir:
            shutil.rmtree(self.datadir, ignore_errors=True)
        if self.log:
            self.log.unlink(missing_ok=True)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log else ""


def start_s3_server(kind: str | None = None) -> S3Server:
    kind = kind or os.environ.get("CKPT_TEST_S3") or ("minio" if find_minio() else "moto")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    datadir = None
    if kind == "minio":
        minio = find_minio()
        if minio is None:
            raise RuntimeError(
                "CKPT_TEST_S3=minio but no minio binary (run scripts/install_minio.sh)")
        datadir = tempfile.mkdtemp(prefix="ckpt-minio-")
        env = {**os.environ, "MINIO_ROOT_USER": ACCESS_KEY, "MINIO_ROOT_PASSWORD": SECRET_KEY,
               "MINIO_BROWSER": "off"}
        cmd = [minio, "server", datadir, "--address", f"127.0.0.1:{port}", "--quiet"]
    elif kind == "moto":
        env = dict(os.environ)
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    else:
        raise RuntimeError(f"unknown CKPT_TEST_S3={kind!r}: use minio or moto")
    fd, log = tempfile.mkstemp(prefix=f"ckpt-{kind}-", suffix=".log")
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = S3Server(kind, endpoint, proc, datadir, Path(log))
    deadline = time.time() + 60
    while True:
        try:
            server.client().list_buckets()
            return server
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                err = server.tail()
                server.stop()
                raise RuntimeError(f"{kind} S3 server did not start on {endpoint}: {err}") from None
            time.sleep(0.2)
