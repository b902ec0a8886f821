"""The suite's Spark JVMs really map the class-data sharing archive (tests/support/spark_cds.py):
when something on the class path stops matching it (a file in the suite's SPARK_CONF_DIR,
a changed jar), the JVM silently loads every class again and the suite takes twice the
CPU; ``-Xshare:on`` turns that silence into a failed start."""

from __future__ import annotations

import os
import subprocess

from spark_jobs.runtime.connect_server import spark_home
from tests.support.spark_cds import CONF_DIR, QUIET, build, spark_env


def test_spark_submit_maps_the_suites_archive():
    archive = build()  # `make test` built it already; a module run alone builds it here
    env = {**os.environ, **spark_env()}
    assert env["SPARK_CONF_DIR"] == str(CONF_DIR) and not any(CONF_DIR.iterdir())
    opts = env["SPARK_SUBMIT_OPTS"]
    assert f"-XX:SharedArchiveFile={archive}" in opts
    # -Xshare:on: a JVM that cannot map the archive refuses to start; the log tags on, so
    # that the reason is in the failure.
    env["SPARK_SUBMIT_OPTS"] = opts.replace(QUIET, "") + \
        " -Xshare:on"
    out = subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--version"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "version" in (out.stdout + out.stderr)
