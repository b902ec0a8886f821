"""Missing input is news: a job that expects its data day's file (``expects=``), or a new
version of an upstream table (``TableInput(expect_new_version=True)``), waits for it
deferred, then declines its epoch with one line and one alert when it never lands, and
consumes it when it lands within the grace. Under `airflow dags test` (which runs the
trigger in its own process), tasks on the test process's Spark Connect server."""

from __future__ import annotations

import subprocess
import threading
import time

import pandas as pd
import pytest

from bench.harness.airflow_env import AIRFLOW, ROOT, airflow, airflow_env, migrate
from bench.harness.airflow_standalone import connect_env
from bench.harness.sinks import WebhookSink
from checkpointing import Coordinator, LocalStorage, TableVersion
from checkpointing.protocol.history import read_failure

pytestmark = pytest.mark.slow
DAG = "ckpt_expected_input"
DAY = "2024-01-01"  # the data day of the run of logical date 2024-01-02
KEY = f"raw/readings/{DAY}.csv"


@pytest.fixture
def af(tmp_path, spark_connect):
    hook = WebhookSink()
    dags = tmp_path / "dags"
    dags.mkdir()
    for name in ("expected_input.py", "expected_table.py"):
        (dags / name).write_text((ROOT / "tests/dags_expected_input" / name).read_text())
    (tmp_path / "data/raw/readings").mkdir(parents=True)
    env = airflow_env(tmp_path / "airflow", AIRFLOW__CORE__DAGS_FOLDER=str(dags),
                      CKPT_STORAGE=f"file://{tmp_path}/ckpt", CKPT_DATA=f"file://{tmp_path}/data",
                      CKPT_ALERT_WEBHOOK_CONN="ckpt_webhook",
                      CKPT_ALERT_WEBHOOK_ENDPOINT="/alerts", AIRFLOW_CONN_CKPT_WEBHOOK=hook.url,
                      **connect_env(spark_connect))
    migrate(env)
    yield env, tmp_path, hook
    hook.stop()


def test_an_input_that_never_lands_declines_the_epoch_once_with_an_alert(af):
    env, tmp, hook = af
    t0 = time.monotonic()
    r = airflow({**env, "EXPECTED_GRACE_SECONDS": "6"}, "dags", "test", DAG, "2024-01-02")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "waiting for it, deferred" in out, out[-3000:]
    assert time.monotonic() - t0 >= 6
    line = f"readings declined epoch 1: expected input missing after waiting 6 s: {KEY}"
    assert line in out, out[-3000:]
    c = Coordinator(LocalStorage(tmp / "ckpt"), "expected_input")
    # Retention (after the decision) keeps what operators look at: the failure record.
    record = read_failure(c.storage, c.layout, 1)
    assert record.reason == "declined" and record.declined_by == "readings", record
    assert KEY in record.detail and str(tmp) not in record.detail
    alert = c.catalog.alert(1)
    assert alert is not None and alert.reason == "declined" and KEY in alert.detail
    # one alert, delivered: the epoch, the reason, the missing key
    assert [b["json"]["alert"]["epoch_id"] for b in hook.received] == [1], hook.received
    assert "aborted (declined)" in hook.received[0]["json"]["text"]
    assert KEY in hook.received[0]["json"]["text"]
    assert c.catalog.manifest() is None  # nothing published


def test_an_input_landing_within_the_grace_is_consumed(af):
    env, tmp, hook = af
    rows = pd.DataFrame({"meter": ["a", "b", "c"], "kwh": [1.5, 2.0, 0.25]})
    code, out = _run_until_waiting(  # the file lands late, within the grace
        {**env, "EXPECTED_GRACE_SECONDS": "300"}, DAG, "2024-01-02",
        "waiting for it, deferred", lambda: rows.to_csv(tmp / "data" / KEY, index=False))
    assert code == 0, out[-3000:]
    c = Coordinator(LocalStorage(tmp / "ckpt"), "expected_input")
    assert c.latest_completed() == 1 and c.catalog.alert(1) is None
    handle = c.completed_handles(1)["readings"]
    assert handle.row_counts == {"landed_rows": len(pd.read_csv(tmp / "data" / KEY))}
    assert hook.received == []


def _run_until_waiting(env: dict, dag: str, day: str, waiting_text: str, then) -> tuple:
    """`airflow dags test` in the background; ``then()`` once its output shows
    ``waiting_text``; (exit code, output)."""
    proc = subprocess.Popen([AIRFLOW, "dags", "test", dag, day], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    waiting = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if waiting_text in line:
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert waiting.wait(240), "".join(lines)[-3000:]
    then()
    code = proc.wait(600)
    reader.join(10)
    return code, "".join(lines)


def test_a_table_without_a_new_version_is_waited_for_then_declined(af):
    from deltalake import DeltaTable, write_deltalake

    env, tmp, hook = af
    table = f"{tmp}/data/tables/landed"
    write_deltalake(table, pd.DataFrame({"meter": ["a", "b", "c"], "kwh": [1.0, 2.0, 3.0]}))
    c = Coordinator(LocalStorage(tmp / "ckpt"), "expected_table")
    r = airflow(env, "dags", "test", "ckpt_expected_table", "2024-01-02")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert c.latest_completed() == 1  # the first epoch expects nothing: any version is new
    assert c.completed_handles(1)["summary"].row_counts == {"summary_rows": 3}

    # The upstream commits nothing: the run waits, then its epoch is declined, alerted once.
    r = airflow({**env, "EXPECTED_GRACE_SECONDS": "6"}, "dags", "test",
                "ckpt_expected_table", "2024-01-03")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "waiting for new versions, deferred, up to 6 s: a version of table 'landed' " \
        "newer than 0" in out, out[-3000:]
    line = ("summary declined epoch 2: expected a new table version after waiting 6 s: "
            "table 'landed' (input 'landed') has no version newer than 0 (its newest: 0)")
    assert line in out, out[-3000:]
    assert str(tmp) not in line
    record = read_failure(c.storage, c.layout, 2)
    assert record.reason == "declined" and record.declined_by == "summary", record
    assert [b["json"]["alert"]["epoch_id"] for b in hook.received] == [2], hook.received
    assert "table 'landed'" in hook.received[0]["json"]["text"]

    # A version landing within the grace is pinned by the epoch and read.
    late = pd.DataFrame({"meter": ["d", "e"], "kwh": [4.0, 5.0]})
    code, out = _run_until_waiting(
        {**env, "EXPECTED_GRACE_SECONDS": "300"}, "ckpt_expected_table", "2024-01-04",
        "waiting for new versions, deferred",
        lambda: write_deltalake(table, late, mode="append"))
    assert code == 0, out[-3000:]
    assert c.latest_completed() == 3 and c.barrier(3).parent_epoch_id == 1
    assert c.barrier(3).table_version("landed") == TableVersion(DeltaTable(table).version())
    assert c.completed_handles(3)["summary"].row_counts == {"summary_rows": len(late)}
    assert len(hook.received) == 1  # nothing more alerted
