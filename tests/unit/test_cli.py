"""The ckpt console script, run as a real subprocess against local storage and S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.harness.s3server import ACCESS_KEY, SECRET_KEY
from checkpointing import Coordinator
from tests.support.helpers import run_epoch

CKPT = [sys.executable, "-m", "checkpointing.ckpt"]


@pytest.fixture
def populated(backend, request, tmp_path):
    """(env for ckpt, coordinator) with two completed epochs and one pending."""
    env = {**os.environ, "CKPT_PIPELINE": "flights_daily"}
    if backend == "local":
        from checkpointing import LocalStorage
        storage = LocalStorage(tmp_path / "store")
        env["CKPT_STORAGE"] = f"file://{tmp_path}/store"
    else:
        storage = request.getfixturevalue("s3_storage")
        server = request.getfixturevalue("s3_server")
        env.update(CKPT_STORAGE=f"s3://{storage.bucket}/root", AWS_ENDPOINT_URL=server.endpoint,
                   AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    c = Coordinator(storage, "flights_daily")
    run_epoch(c, tmp=tmp_path, payload=b"one")
    run_epoch(c, tmp=tmp_path, payload=b"two")
    from tests.support.helpers import DIAMOND
    c.begin_epoch(DIAMOND, "scheduled__2013-01-03")
    return env, c


def ckpt(env, *args):
    return subprocess.run([*CKPT, *args], env=env, capture_output=True, text=True, timeout=120)


def test_epochs_table_and_json(populated):
    env, _ = populated
    r = ckpt(env, "epochs", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["epoch_id"], x["status"], x["tasks_acked"], x["tasks_total"]) for x in rows] \
        == [(3, "pending", 0, 4), (2, "completed", 4, 4), (1, "completed", 4, 4)]
    # One set of names: `show --json` has every field of a listed row (the REST API's
    # rows are the same function's) but the listing's own max_attempt.
    shown = json.loads(ckpt(env, "show", "2", "--json").stdout)
    assert set(rows[1]) - {"max_attempt"} <= set(shown), set(rows[1]) - set(shown)
    assert (shown["epoch_id"], shown["run_id"]) == (rows[1]["epoch_id"], rows[1]["run_id"])
    table = ckpt(env, "epochs").stdout
    assert table.splitlines()[0].split()[:4] == ["EPOCH", "STATUS", "STATE", "RUN"]
    assert "scheduled__2013-01-03" in table
    state = {line.split()[0]: line.split()[2] for line in table.splitlines()[1:]}
    assert state == {"3": "kept", "2": "kept", "1": "kept"}, table
    # once retention (the last completed epoch by default) deleted epoch 1's files, its
    # line still says completed, and that only its record is left
    assert ckpt(env, "retention").returncode == 0
    table = ckpt(env, "epochs").stdout
    state = {line.split()[0]: line.split()[1:3] for line in table.splitlines()[1:]}
    assert state["1"] == ["completed", "history"] and state["2"] == ["completed", "kept"], table


def test_a_reader_that_stops_early_is_no_error(populated):
    """`ckpt show N | head`: the reader closes the pipe before ckpt writes (here `true`,
    which reads nothing and exits at once); ckpt ends quietly with 0, as Unix tools do (it
    used to say "ckpt: error: [Errno 32] Broken pipe" and exit 2)."""
    env, _ = populated
    cmd = " ".join([*CKPT, "show", "2"]) + " | true"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)


def test_show_latest_verify(populated):
    env, c = populated
    r = ckpt(env, "show", "2", "--json")
    s = json.loads(r.stdout)
    assert s["status"] == "completed" and len(s["tasks"]) == 4
    assert all(t["acked_attempt"] == 1 for t in s["tasks"])
    assert ckpt(env, "latest").stdout.strip() == "2"
    v = ckpt(env, "verify", "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["files_checked"] == 5
    # Corrupt one state file: verify exits 1 and names it.
    ref = c.completed_handles(2)["src_a"].files[0]
    c.storage.write(c.storage.key_for_uri(ref.uri), b"tampered")
    v = ckpt(env, "verify", "2")
    assert v.returncode == 1 and "PROBLEM task src_a" in v.stdout
    # --all checks every retained completed epoch, one line (or JSON object) each: epoch 1
    # is fine, epoch 2 is not, so the command fails and says which.
    v = ckpt(env, "verify", "--all", "--json")
    reports = {d["epoch_id"]: d["ok"] for d in map(json.loads, v.stdout.splitlines())}
    assert v.returncode == 1 and reports == {1: True, 2: False}, v.stdout + v.stderr


def test_savepoint_commands(populated):
    env, _ = populated
    assert ckpt(env, "savepoint", "create", "pre-upgrade", "--epoch", "1").returncode == 0
    again = ckpt(env, "savepoint", "create", "pre-upgrade")
    assert again.returncode == 2 and "exists already" in again.stderr
    rows = json.loads(ckpt(env, "savepoint", "list", "--json").stdout)
    assert [(r["name"], r["epoch_id"]) for r in rows] == [("pre-upgrade", 1)]
    assert ckpt(env, "savepoint", "delete", "pre-upgrade").returncode == 0
    assert json.loads(ckpt(env, "savepoint", "list", "--json").stdout) == []


def _one_line_error(r, pattern):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and pattern in lines[0], r.stderr


def test_bad_input_is_one_line(populated, tmp_path):
    env, c = populated
    _one_line_error(ckpt({**env, "CKPT_PIPELINE": "nope"}, "epochs"), "has no epochs")
    _one_line_error(ckpt(env, "show", "abc"), "invalid epoch id")
    _one_line_error(ckpt(env, "show", "77"), "epoch 77 of pipeline 'flights_daily' does not")
    _one_line_error(ckpt({**env, "CKPT_PIPELINE": "../etc"}, "epochs"), "invalid pipeline id")
    c.storage.write(c.layout.metadata(1), b'{"format":"ckpt.epoch-metadata",'
                                           b'"protocol_version":"9.0"}')
    _one_line_error(ckpt(env, "show", "1"), "protocol version 9.0")
    c.storage.write(c.layout.metadata(1), b"{trunc")
    _one_line_error(ckpt(env, "show", "1"), "not valid JSON")
    assert c.storage.read(c.layout.metadata(1))[0] == b"{trunc"  # nothing overwritten


def test_unreachable_endpoint_and_missing_config(tmp_path):
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
           "AWS_MAX_ATTEMPTS": "1"}
    env.pop("CKPT_STORAGE", None)
    r = ckpt(env, "--pipeline", "p", "epochs")
    _one_line_error(r, "no storage given")
    r = ckpt(env, "--storage", "s3://b/p", "--endpoint-url", "http://127.0.0.1:9",
             "--pipeline", "p", "latest")
    _one_line_error(r, "cannot reach S3 endpoint http://127.0.0.1:9")


def test_complete_is_the_commit_step_by_hand(populated, tmp_path):
    """`ckpt complete N` names the tasks that have not acknowledged (exit 2, nothing
    decided), completes the epoch once they all have, and reports a decided epoch again
    without deciding it twice."""
    from tests.support.helpers import DIAMOND, ack_task

    env, c = populated
    pending = max(c.epoch_ids())
    r = ckpt(env, "complete", str(pending))
    assert r.returncode == 2 and "have not acknowledged" in r.stderr, r.stderr
    assert c.status(pending) == "pending"
    for task in DIAMOND:
        ack_task(c, pending, task, tmp=tmp_path)
    r = ckpt(env, "complete", str(pending))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"epoch_id": pending, "status": "completed"}
    assert c.status(pending) == "completed" and c.latest_completed() == pending
    decided = c.metadata(pending).writer
    r = ckpt(env, "complete", str(pending))
    assert r.returncode == 0 and c.metadata(pending).writer == decided
