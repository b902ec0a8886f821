"""Failure history and retention that never breaks a view (PROTOCOL 5.12, 6.9): failed
epochs stay visible with their reason, tasks, attempts and alert after retention deleted
their files; an epoch a savepoint needs is kept whole; damaged epochs are listed, not fatal;
`ckpt abort` ends a stuck epoch. Checked through the library and the real `ckpt` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from checkpointing import (
    CheckpointConfig,
    Coordinator,
    SnapshotWriter,
    create_savepoint,
    run_retention,
    verify_epoch,
)
from checkpointing.protocol.history import history_ids, read_failure
from checkpointing.records.alerts import EpochAlert, read_alert, record_alert
from checkpointing.views.listing import list_epochs
from checkpointing.views.summary import SummaryCache
from tests.support.helpers import DIAMOND, ack_task, run_epoch

CKPT = [sys.executable, "-m", "checkpointing.ckpt"]


def ckpt(storage, *args):
    env = {**os.environ, "CKPT_PIPELINE": "p"}
    if hasattr(storage, "bucket"):  # S3: the server's endpoint; credentials are in the env
        env.update(CKPT_STORAGE=storage.uri("").rstrip("/"),
                   AWS_ENDPOINT_URL=storage.endpoint_url)
    else:
        env["CKPT_STORAGE"] = f"file://{storage.root}"
    return subprocess.run([*CKPT, *args], env=env, capture_output=True, text=True, timeout=120)


def failed_epoch(c: Coordinator, tmp, run_id: str, failing: str = "src_b") -> int:
    """An epoch in which src_a acknowledged, ``failing`` tried twice and never acked."""
    b = c.begin_epoch(DIAMOND, run_id)
    ack_task(c, b.epoch_id, "src_a", files={"s": b"a"}, tmp=tmp)
    c.register_attempt(b.epoch_id, failing, 1)
    c.register_attempt(b.epoch_id, failing, 2)
    meta = c.abort(b.epoch_id, "declined", f"task {failing} failed", declined_by=failing)
    assert record_alert(c.storage, c.layout, EpochAlert.from_abort("p", meta, b))
    return b.epoch_id


def test_failed_epoch_stays_visible_after_retention(storage, tmp_path):
    c = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1, failure_history=2))
    run_epoch(c, tmp=tmp_path, payload=b"one")
    failed = failed_epoch(c, tmp_path, "r-fail")
    run_epoch(c, tmp=tmp_path, payload=b"three", run_id="r3")
    report = run_retention(c)
    assert failed in report.deleted_epochs
    assert not list(storage.list(c.layout.epoch_prefix(failed)))  # its files are gone

    rec = read_failure(storage, c.layout, failed)
    assert rec.reason == "declined" and rec.declined_by == "src_b" and rec.run_id == "r-fail"
    assert rec.tasks["src_a"].status == "acked" and rec.tasks["src_b"].attempts == 2
    assert rec.tasks["src_b"].status == "not_acked"
    assert set(rec.missing_tasks) == {"src_b", "join", "sink"}
    assert read_alert(storage, c.layout, failed).reason == "declined"

    r = ckpt(storage, "epochs", "--json")
    assert r.returncode == 0, r.stderr
    rows = {x["epoch_id"]: x for x in json.loads(r.stdout)}
    assert set(rows) == {1, failed, 3}  # epoch 1's files retired: its summary kept
    assert (rows[1]["status"], rows[1]["source"]) == ("completed", "history")
    assert rows[failed]["status"] == "aborted" and rows[failed]["declined_by"] == "src_b"
    assert (rows[failed]["tasks_acked"], rows[failed]["tasks_total"]) == (1, 4)
    shown = json.loads(ckpt(storage, "show", str(failed), "--json").stdout)
    assert shown["source"] == "history" and shown["reason"] == "declined"
    assert {t["task_id"]: t["attempts"] for t in shown["tasks"]}["src_b"] == 2


def test_failure_history_is_bounded(storage, tmp_path):
    c = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1, failure_history=2))
    run_epoch(c, tmp=tmp_path)
    failures = [failed_epoch(c, tmp_path, f"r{i}") for i in range(4)]
    report = run_retention(c)
    assert report.pruned_history == failures[:2]
    assert history_ids(storage, c.layout) == failures[2:]
    listing = list_epochs(c, limit=50)
    assert [r.epoch_id for r in listing.rows] == [*reversed(failures[2:]), 1]
    assert listing.total == len(listing.rows)


def test_savepoint_epoch_is_kept_whole_and_listing_survives_damage(storage, tmp_path):
    """Files written under the epoch's own prefix (as Spark executors write them) and
    referenced by a savepoint: the epoch keeps its documents with them."""
    c = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1))
    plan = {"t": DIAMOND["src_a"]}

    def epoch(payload: bytes, run_id: str) -> int:
        b = c.begin_epoch(plan, run_id)
        c.register_attempt(b.epoch_id, "t", 1)
        w = SnapshotWriter(storage, c.layout, b.epoch_id, "t", 1, shared=False)
        (tmp_path / run_id).write_bytes(payload)
        w.add_file("part-0", tmp_path / run_id)
        c.acknowledge(b.epoch_id, "t", 1, w.handle())
        c.complete(b.epoch_id)
        return b.epoch_id

    e1 = epoch(b"one", "r1")
    create_savepoint(c, "sp1", e1)
    e2, e3 = epoch(b"two", "r2"), epoch(b"three", "r3")
    report = run_retention(c)
    assert report.deleted_epochs == [e2] and e1 in report.kept_epochs
    assert not list(storage.list(c.layout.epoch_prefix(e2)))
    assert c.metadata(e1).completed and verify_epoch(c, e1).ok
    r = ckpt(storage, "epochs", "--json")
    assert r.returncode == 0, r.stderr
    assert [x["epoch_id"] for x in json.loads(r.stdout)] == [e3, e2, e1]  # e2: its summary
    list_epochs(c, per_task=True)  # as the page's listing: writes the summaries

    storage.delete(c.layout.barrier(e1))  # damage by hand
    c2 = Coordinator(storage, "p")
    # The listing serves decided epochs from their summaries (PROTOCOL 5.7): it still
    # lists e1; showing e1 reads its documents and names the damage.
    r = ckpt(storage, "epochs", "--json")
    assert r.returncode == 0, r.stderr
    assert [(x["epoch_id"], x["status"]) for x in json.loads(r.stdout)] == [
        (e3, "completed"), (e2, "completed"), (e1, "completed")]
    shown = ckpt(storage, "show", str(e1))
    assert shown.returncode == 2 and "barrier" in shown.stderr, shown.stderr
    # Without a summary (an epoch decided by a 1.4 writer) the row is computed from the
    # documents: listed as damaged, never dropped or fatal.
    storage.delete(c.layout.epoch_summary(e1))
    r = ckpt(storage, "epochs", "--json")
    assert r.returncode == 0, r.stderr
    assert [(x["epoch_id"], x["status"]) for x in json.loads(r.stdout)] == [
        (e3, "completed"), (e2, "completed"), (e1, "damaged")]
    listing = list_epochs(c2, cache=SummaryCache())
    assert listing.total == 3 and "no barrier" in listing.rows[2].detail


def test_ckpt_abort_ends_a_stuck_epoch(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path)
    stuck = c.begin_epoch(DIAMOND, "r-stuck").epoch_id
    r = ckpt(storage, "abort", str(stuck), "--reason", "runner host lost")
    assert r.returncode == 0, r.stderr
    assert "aborted" in r.stdout and "src_a" in r.stdout
    meta = Coordinator(storage, "p").metadata(stuck)
    assert meta.reason == "cancelled" and "runner host lost" in meta.detail
    # The pipeline is no longer blocked by max_concurrent_epochs.
    assert c.begin_epoch(DIAMOND, "r-next").epoch_id == stuck + 1
    again = ckpt(storage, "abort", str(stuck), "--reason", "again")
    assert again.returncode == 2
    assert again.stderr.strip() == f"ckpt: error: epoch {stuck} is aborted; only a pending " \
        "epoch can be aborted"
    assert ckpt(storage, "abort", "1", "--reason", "x").returncode == 2  # completed: refused
    assert c.metadata(1).completed


def test_an_old_epoch_shows_its_pins_reads_and_metrics_after_retention(storage, tmp_path):
    """With retained_epochs=1 every completed epoch but the last loses its files; `ckpt
    show` of it still gives the version each table input was pinned to, the range each
    task consumed, the job's metrics and the table version it committed, from the summary
    retention kept (5.19), and the listing names it with the REST API's fields."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from checkpointing.protocol.barrier import TaskPlan
    from checkpointing.protocol.table_inputs import TableInput

    upstream = tmp_path / "orders"
    plan = {"gold": TaskPlan((), False, {"orders": TableInput(f"file://{upstream}")})}
    c = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1, epoch_history=2))
    reads = {}
    for n in range(1, 5):
        write_deltalake(str(upstream), pa.table({"id": [n]}), mode="append")  # version n-1
        b = c.begin_epoch(plan, f"r{n}")
        assert b.table_versions["orders"].version == n - 1
        c.register_attempt(b.epoch_id, "gold", 1)
        w = SnapshotWriter(storage, c.layout, b.epoch_id, "gold", 1)
        reads[n] = {"from_version": None if n == 1 else n - 2, "to_version": n - 1,
                    "full": n == 1, "files_added": 1, "files_removed": 0}
        c.acknowledge(b.epoch_id, "gold", 1, w.handle(
            metrics={"late_rows": 10 * n, "table_inputs": {"orders": reads[n]}}))
        assert c.complete(b.epoch_id).completed
        run_retention(c)
    assert not list(storage.list(c.layout.epoch_prefix(2)))  # its files are gone
    shown = json.loads(ckpt(storage, "show", "2", "--json").stdout)
    assert shown["source"] == "history" and shown["status"] == "completed"
    assert shown["table_pins"] == {"orders": {"version": 1}}
    [task] = shown["tasks"]
    assert task["metrics"]["late_rows"] == 20
    assert task["metrics"]["table_inputs"] == {"orders": reads[2]}
    text = ckpt(storage, "show", "2").stdout
    assert "table inputs pinned: orders v1" in text, text
    assert "gold: read orders (v0, v1], 1 file(s) added, 0 removed" in text, text
    assert '"late_rows": 20' in text, text
    # The history keeps the newest epoch_history summaries: epoch 1's is pruned.
    listed = json.loads(ckpt(storage, "epochs", "--json").stdout)
    assert [(r["epoch_id"], r["source"]) for r in listed] == [
        (4, "epoch"), (3, "history"), (2, "history")]
    assert ckpt(storage, "show", "1").returncode == 2


def test_a_lister_that_read_an_epoch_before_retention_deleted_it_shows_its_history(
        storage, tmp_path):
    """A long-lived process (the demo, the api-server) read a completed epoch's barrier and
    decision; retention in another process deletes its files and keeps its summary. The
    listing then shows the kept summary (every task acknowledged), not the documents it
    cached (which, without the acknowledgements, read as a completed epoch with none)."""
    viewer = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1))
    committer = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1))
    run_epoch(committer, tmp=tmp_path, payload=b"one", run_id="r1")
    first = list_epochs(viewer, limit=10, cache=SummaryCache()).rows
    assert [(s.epoch_id, s.tasks_acked, s.source) for s in first] == [(1, 4, "epoch")]
    run_epoch(committer, tmp=tmp_path, payload=b"two", run_id="r2")
    assert run_retention(committer).deleted_epochs == [1]
    rows = list_epochs(viewer, limit=10, cache=SummaryCache()).rows
    assert [(s.epoch_id, s.tasks_acked, s.tasks_total, s.source) for s in rows] == [
        (2, 4, 4, "epoch"), (1, 4, 4, "history")]

