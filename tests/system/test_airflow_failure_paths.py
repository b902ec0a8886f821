"""Failure paths under a real `airflow standalone` (LocalExecutor, PostgreSQL, tasks on the test
process's Spark Connect server): every one ends its DAG run within seconds of the epoch's
decision, and nothing is written into a decided epoch.

- an epoch aborted through the REST API while a task runs: the run ends failed, the next
  queued run starts and completes (an operator's abort does not spend the failure budget,
  ``tolerable_failed_epochs=0``);
- a running task marked failed by an operator, and an epoch declined by its task: the run
  ends failed soon after the commit step's abort;
- a running DAG run marked failed by an operator: its epoch is cancelled within seconds
  (not at its timeout) and the next run begins;
- a DAG run failed by the scheduler at its ``dagrun_timeout``: its epoch is cancelled
  within seconds of the run's end, by the listener in the scheduler's process;
- a task that acknowledges after its epoch was aborted *and deleted by retention* fails
  with "epoch N was aborted (...)" and writes nothing under the deleted epoch;
- two DAGs with their own pipeline ids and storage roots, served by one api-server: each
  one's page data, savepoint and backfill preview act on its own storage; answers carry no
  storage path; unknown fields are refused; a backfill range is bounded.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from bench.harness.airflow_env import ROOT
from bench.harness.airflow_standalone import Standalone, connect_env
from bench.harness.pg import airflow_database
from bench.harness.sinks import WebhookSink
from checkpointing import Coordinator, LocalStorage, run_retention
from checkpointing.protocol.history import read_failure

pytestmark = pytest.mark.slow
A, B, C = "ckpt_fp_a", "ckpt_fp_b", "ckpt_fp_c"
PIPELINE = {A: "failure_paths_a", B: "failure_paths_b", C: "failure_paths_c"}
#: the issue's bound: a run whose epoch was decided ends within this many seconds
END_WITHIN_S = 30


@pytest.fixture(scope="module")
def af(tmp_path_factory, spark_connect):
    tmp = tmp_path_factory.mktemp("failure-paths")
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "pipelines.py").write_text(
        (ROOT / "tests/dags_failure_paths/pipelines.py").read_text())
    lineage = WebhookSink()  # an OpenLineage receiver, through the provider's HTTP transport
    sa = Standalone(
        tmp / "airflow", ready_dag=B,
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
            {"type": "http", "url": lineage.url, "endpoint": "api/v1/lineage"}),
        # The environment's storage stays empty: each DAG names its own.
        CKPT_STORAGE=f"file://{tmp}/env-ckpt", CKPT_DATA=f"file://{tmp}/data",
        CKPT_FP_STORAGE_A=f"file://{tmp}/ckpt-a", CKPT_FP_STORAGE_B=f"file://{tmp}/ckpt-b",
        CKPT_FP_STORAGE_C=f"file://{tmp}/ckpt-c",
        **airflow_database("ckpt_airflow_failure_paths"), **connect_env(spark_connect),
    )
    (tmp / "data/control").mkdir(parents=True)
    sa.lineage = lineage
    try:
        sa.start()
        yield sa, tmp
    finally:
        sa.stop()
        lineage.stop()


# ------------------------------------------------------------------ helpers
def _coord(tmp: Path, dag: str) -> Coordinator:
    return Coordinator(LocalStorage(tmp / f"ckpt-{dag[-1]}"), PIPELINE[dag])


def _control(tmp: Path, name: str, on: bool = True) -> None:
    path = tmp / "data/control" / name
    if on:
        path.write_bytes(b"")
    else:
        path.unlink(missing_ok=True)


def _wait(pred, timeout: float, what: str, sa: Standalone, dag: str = A,
          run: str | None = None):
    return sa.wait_for(pred, timeout, what, (lambda: sa.diagnose(dag, run)) if run else None)


def _epoch_of(sa: Standalone, tmp: Path, dag: str, run: str) -> int:
    """The epoch the run's begin step opened: its run index in storage, or the begin step's
    XCom (an epoch declined at once may be aborted and deleted by retention, run index
    included, before the index is read)."""
    c = _coord(tmp, dag)

    def found() -> int | None:
        ids = c.epochs_of_run(run)
        if ids:
            return ids[-1]
        r = sa.get(f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/checkpoint_begin/"
                   "xcomEntries/return_value", params={"deserialize": "true"})
        return int(r.json()["value"]) if r.ok and r.json().get("value") else None

    return _wait(found, 300, f"the epoch of {run}", sa, dag, run)


def _held(sa: Standalone, tmp: Path, dag: str, run: str, epoch: int) -> None:
    _wait(lambda: (tmp / f"data/control/held-{epoch}").exists(), 300,
          f"epoch {epoch}'s task at its gate", sa, dag, run)


def _ended_at(sa: Standalone, dag: str, run: str) -> float:
    r = sa.get(f"/api/v2/dags/{dag}/dagRuns/{run}")
    return _ts(r.json()["end_date"])


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _hold_run(sa: Standalone, tmp: Path, dag: str, day: str) -> tuple[str, int]:
    """Trigger a run whose first task stops at its gate; (run id, epoch id)."""
    _control(tmp, "hold")
    run = sa.trigger(dag, f"{day}T00:00:00Z")
    epoch = _epoch_of(sa, tmp, dag, run)
    _held(sa, tmp, dag, run, epoch)
    _control(tmp, "hold", on=False)  # later runs pass the gate
    return run, epoch


def _leftovers(epoch_dir: Path, report: object) -> str:
    """What a deleted epoch's directory still holds, with each entry's age: a failure says
    which writer came back (or which delete was lost), not only that something did."""
    now, rows = time.time(), []
    for p in sorted(epoch_dir.rglob("*")):
        try:
            age = f"{now - p.stat().st_mtime:.1f}s old"
        except OSError:  # deleted meanwhile
            age = "gone since"
        rows.append(f"{p.relative_to(epoch_dir)}{'/' if p.is_dir() else ''} ({age})")
    return f"left in {epoch_dir.name}: {rows or 'empty directories only'}; {report}"


def _log(sa: Standalone, dag: str, run: str, task: str) -> str:
    r = sa.get(f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/logs/1",
               params={"full_content": "true"}, headers={"Accept": "application/json"})
    return json.dumps(r.json())


# ------------------------------------------------------------------ tests
def test_rest_abort_ends_the_run_and_the_queued_run_completes(af):
    sa, tmp = af
    run1, epoch = _hold_run(sa, tmp, A, "2024-01-02")
    run2 = sa.trigger(A, "2024-01-03T00:00:00Z")  # queued behind run1 (max_active_runs=1)
    assert sa.run_state(A, run2) == "queued"
    r = sa.post(f"/ckpt/api/dags/{A}/epochs/{epoch}/abort", {"reason": "wrong input"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "aborted" and body["reason"] == "cancelled", body
    assert body["dag_run"] == {"run_id": run1, "state": "failed"}, body
    decided = _ts(read_failure(_coord(tmp, A).storage, _coord(tmp, A).layout, epoch)
                  .decided_at)
    assert sa.wait_run(A, run1, timeout=120) == "failed"
    assert _ended_at(sa, A, run1) - decided <= END_WITHIN_S
    # The queued run starts now, and an operator's abort did not spend the failure budget
    # (tolerable_failed_epochs=0): it completes.
    assert sa.wait_run(A, run2, timeout=300) == "success", sa.tail()
    c = _coord(tmp, A)
    assert c.registry().lineage("main").consecutive_failed == 0
    assert c.latest_completed() == _epoch_of(sa, tmp, A, run2)


def test_task_marked_failed_ends_the_run(af):
    sa, tmp = af
    run, epoch = _hold_run(sa, tmp, A, "2024-01-04")
    r = sa.write("PATCH", f"/api/v2/dags/{A}/dagRuns/{run}/taskInstances/count",
                 {"new_state": "failed"})
    assert r.status_code == 200, r.text
    assert sa.wait_run(A, run, timeout=180) == "failed"
    c = _coord(tmp, A)
    rec = _wait(lambda: read_failure(c.storage, c.layout, epoch), 60, "failure record", sa,
                A, run)
    assert rec.reason == "declined" and rec.declined_by == "count", rec
    assert _ended_at(sa, A, run) - _ts(rec.decided_at) <= END_WITHIN_S


def test_run_marked_failed_has_its_epoch_cancelled_and_the_next_run_begins(af):
    """An operator marks a running DAG run failed in Airflow (its UI and REST API do the
    same): the commit step and the watchdog are skipped, yet the epoch does not wait for its
    900 s timeout holding the lineage's slot. The plugin's DAG-run listener cancels it, and
    the next run begins and completes (a cancellation spends no failure budget)."""
    sa, tmp = af
    run, epoch = _hold_run(sa, tmp, A, "2024-01-08")
    marked = time.time()
    r = sa.write("PATCH", f"/api/v2/dags/{A}/dagRuns/{run}", {"state": "failed"})
    assert r.status_code == 200 and r.json()["state"] == "failed", r.text
    c = _coord(tmp, A)
    rec = _wait(lambda: read_failure(c.storage, c.layout, epoch), END_WITHIN_S,
                "the ended run's epoch cancelled", sa, A, run)
    assert rec.reason == "cancelled" and "DAG run ended failed" in rec.detail, rec
    assert _ts(rec.decided_at) - marked <= END_WITHIN_S
    nxt = sa.trigger(A, "2024-01-09T00:00:00Z")
    assert sa.wait_run(A, nxt, timeout=300) == "success", sa.diagnose(A, nxt)
    assert c.latest_completed() == _epoch_of(sa, tmp, A, nxt)
    assert c.registry().lineage("main").consecutive_failed == 0


def test_run_past_its_dagrun_timeout_has_its_epoch_cancelled(af):
    """The scheduler fails a run at its DAG's ``dagrun_timeout`` and skips its unfinished
    tasks, the commit step and the watchdog among them: the listener, called in the
    scheduler's process this time, cancels the epoch within seconds of the run's end."""
    sa, tmp = af
    run = sa.trigger(C, "2024-01-02T00:00:00Z")
    epoch = _epoch_of(sa, tmp, C, run)
    assert sa.wait_run(C, run, timeout=300) == "failed", sa.diagnose(C, run)
    tries = sa.task_tries(C, run)
    assert tries["checkpoint_commit"][0] == "skipped", tries
    c = _coord(tmp, C)
    rec = _wait(lambda: read_failure(c.storage, c.layout, epoch), END_WITHIN_S,
                "the timed-out run's epoch cancelled", sa, C, run)
    assert rec.reason == "cancelled", rec
    assert "DAG run ended failed" in rec.detail and "timed_out" in rec.detail, rec
    assert _ts(rec.decided_at) - _ended_at(sa, C, run) <= END_WITHIN_S
    assert c.registry().lineage("main").consecutive_failed == 0


def test_task_stopped_by_airflow_interrupts_its_spark_work(af):
    """A task marked failed while its job is inside a Spark action: the operator's on_kill
    interrupts the attempt's operations on the Spark Connect server, which would otherwise
    keep running them (for a retry to reattach to) long after the task process was killed."""
    sa, tmp = af
    _control(tmp, "hold-spark")
    try:
        run = sa.trigger(A, "2024-01-07T00:00:00Z")
        epoch = _epoch_of(sa, tmp, A, run)
        alive = tmp / f"data/control/spark-alive-{epoch}"
        _wait(alive.exists, 300, "the job inside its Spark action", sa, A, run)
        r = sa.write("PATCH", f"/api/v2/dags/{A}/dagRuns/{run}/taskInstances/count",
                     {"new_state": "failed"})
        assert r.status_code == 200, r.text
        # The server's Python worker touches the file while Spark runs the action.
        _wait(lambda: time.time() - alive.stat().st_mtime > 5, 60,
              "the attempt's Spark work interrupted", sa, A, run)
        assert sa.wait_run(A, run, timeout=180) == "failed"
    finally:
        _control(tmp, "hold-spark", on=False)
    assert "stopped by Airflow: interrupted its Spark work (1 running" in \
        _log(sa, A, run, "count")


def test_declined_epoch_ends_the_run(af):
    sa, tmp = af
    _control(tmp, "decline")
    try:
        run = sa.trigger(A, "2024-01-05T00:00:00Z")
        epoch = _epoch_of(sa, tmp, A, run)
        assert sa.wait_run(A, run, timeout=300) == "failed"
    finally:
        _control(tmp, "decline", on=False)
    c = _coord(tmp, A)
    rec = read_failure(c.storage, c.layout, epoch)
    assert rec is not None and rec.reason == "declined" and rec.declined_by == "count", rec
    assert "bad data" in rec.detail
    assert _ended_at(sa, A, run) - _ts(rec.decided_at) <= END_WITHIN_S
    assert "declined epoch" in _log(sa, A, run, "count")
    # A lineage backend sees the epoch aborted: the declining task's FAIL event names the
    # epoch, its status and reason in the checkpoint facet. Earlier tests' runs failed
    # `count` too, and events arrive after the run ends: wait for this epoch's.
    def fails() -> list:
        return [ev["run"]["facets"].get("dagCheckpoints_epoch") or {} for ev in
                (b["json"] for b in list(sa.lineage.received))
                if ev["eventType"] == "FAIL" and ev["job"]["name"] == f"{A}.count"]

    facets = sa.wait_for(lambda: [f for f in fails() if f.get("epoch") == epoch], 60,
                         f"the declining task's FAIL event naming epoch {epoch}",
                         fails)
    assert {"epoch": epoch, "status": "aborted", "reason": "declined"}.items() <= \
        facets[-1].items(), facets


def test_ack_after_abort_and_retention_is_refused_and_writes_nothing(af):
    sa, tmp = af
    run, epoch = _hold_run(sa, tmp, A, "2024-01-06")
    r = sa.post(f"/ckpt/api/dags/{A}/epochs/{epoch}/abort",
                {"reason": "late ack drill", "fail_run": False})
    assert r.status_code == 200 and r.json()["dag_run"]["state"] is None, r.text
    c = _coord(tmp, A)
    report = run_retention(c)  # as a commit step of another run would
    assert epoch in report.deleted_epochs
    epoch_dir = tmp / "ckpt-a" / PIPELINE[A] / "epochs" / f"{epoch:010d}"
    assert not epoch_dir.exists(), _leftovers(epoch_dir, report)
    _control(tmp, f"open-{epoch}")  # the held task goes on and acknowledges
    seen: set[str] = set()
    deadline = time.time() + 300
    while sa.run_state(A, run) not in ("success", "failed") and time.time() < deadline:
        if epoch_dir.exists():
            seen.update(str(p.relative_to(epoch_dir)) for p in epoch_dir.rglob("*"))
        time.sleep(0.2)
    assert sa.run_state(A, run) == "failed"
    assert not seen, f"written into deleted epoch {epoch}: {sorted(seen)}"
    assert not epoch_dir.exists()
    tries = sa.task_tries(A, run)
    assert tries["count"][0] == "failed", tries
    assert f"epoch {epoch} was aborted (cancelled" in _log(sa, A, run, "count")


def test_two_dags_each_on_its_own_storage(af):
    sa, tmp = af
    run = sa.trigger(B, "2024-01-02T00:00:00Z")
    assert sa.wait_run(B, run, timeout=300) == "success", sa.tail()
    epoch_b = _epoch_of(sa, tmp, B, run)
    listing = sa.get(f"/ckpt/api/dags/{B}/epochs").json()
    assert [e["epoch_id"] for e in listing["epochs"]] == [epoch_b], listing
    assert listing["epochs"][0]["status"] == "completed"
    ids_a = {e["epoch_id"] for e in sa.get(f"/ckpt/api/dags/{A}/epochs").json()["epochs"]}
    assert len(ids_a) >= 3  # A's failures and completions, from A's storage
    assert not (tmp / "env-ckpt").exists() or not any((tmp / "env-ckpt").rglob("*"))
    assert not (tmp / "ckpt-a" / PIPELINE[B]).exists()
    assert not (tmp / "ckpt-b" / PIPELINE[A]).exists()
    # The job printed the files it read: the task log has them, without where they live.
    log = _log(sa, B, run, "total")
    assert "total read" in log and f"{PIPELINE[B]}/epochs/" in log, log[-3000:]
    assert f"{tmp}/ckpt-b" not in log and f"{tmp}/data" not in log, log[-3000:]

    r = sa.post(f"/ckpt/api/dags/{B}/savepoints", {"name": "sp1", "epoch_id": epoch_b})
    assert r.status_code == 201, r.text
    assert (tmp / "ckpt-b" / PIPELINE[B] / "savepoints/sp1.json").exists()
    preview = sa.post(f"/ckpt/api/dags/{B}/backfills",
                      {"from_savepoint": "sp1", "first_day": "2024-01-02",
                       "last_day": "2024-01-03", "dry_run": True})
    assert preview.status_code == 200, preview.text
    assert preview.json()["origin"]["epoch_id"] == epoch_b

    # The API, probed as an attacker would.
    for path, body, status in [
        (f"/ckpt/api/dags/{B}/epochs/999999/abort", {"reason": "x"}, 404),
        (f"/ckpt/api/dags/{B}/savepoints", {"name": "sp2", "epoch_id": 999999}, 404),
        (f"/ckpt/api/dags/{B}/epochs/{epoch_b}/abort", {"reason": "x", "force": True}, 422),
        (f"/ckpt/api/dags/{B}/backfills", {"from_epoch": epoch_b, "first_day": "2024-01-03",
                                          "last_day": "2040-01-04", "dry_run": True}, 400),
        (f"/ckpt/api/dags/{B}/backfills", {"from_epoch": epoch_b, "first_day": "2024-12-20",
                                          "last_day": "2025-01-04", "dry_run": True}, 400),
    ]:
        t0 = time.monotonic()
        r = sa.post(path, body)
        assert r.status_code == status, (path, body, r.status_code, r.text)
        assert str(tmp) not in r.text and "file://" not in r.text, r.text
        assert len(r.text) < 2000 and time.monotonic() - t0 < 10, r.text
    r = sa.get(f"/ckpt/api/dags/{B}/epochs/999999")
    assert r.status_code == 404 and str(tmp) not in r.text, r.text
    assert "end date" in sa.post(f"/ckpt/api/dags/{B}/backfills", {
        "from_epoch": epoch_b, "first_day": "2024-12-20", "last_day": "2025-01-04",
        "dry_run": True}).json()["detail"]
