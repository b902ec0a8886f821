"""`ckpt-airflow backfill`, the command line of the plugin's backfill API, against a real
api-server (SQLite metadata database, SimpleAuthManager): the api-server records the
lineage's origin and creates the backfill through Airflow's public REST API with the
caller's token, the lineage in every run's conf; a bad or refused request changes nothing,
and a user without the right to backfill is refused by Airflow itself."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from bench.harness.airflow_env import airflow, migrate
from bench.harness.airflow_standalone import PASSWORDS, Standalone
from checkpointing import Coordinator, LocalStorage, plan_from_edges
from checkpointing.records.backfill_lineages import list_origins, read_origin
from spark_jobs.flights.pipeline import EDGES, PUBLISHING
from tests.support.helpers import ack_task

CKPT_AIRFLOW = str(Path(sys.executable).parent / "ckpt-airflow")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def af(tmp_path_factory):
    """One api-server for the module; each test backfills its own days, and every backfill
    is cancelled after its test (Airflow runs one backfill of a DAG at a time). Its
    base_url has a path, as behind a proxy: the command line and the plugin's own call of
    Airflow's API both keep it."""
    tmp = tmp_path_factory.mktemp("cli")
    server = Standalone(tmp / "airflow", ("api-server",), prefix="/airflow",
                        CKPT_STORAGE=f"file://{tmp}/ckpt", CKPT_DATA=f"file://{tmp}/data")
    migrate(server.env)
    # The input of the days the tests backfill has landed (the preview checks the DAG's
    # daily_inputs); no job reads it here.
    data = LocalStorage(tmp / "data")
    for day in range(1, 20):
        data.write(f"raw/flights/2013-01-{day:02d}.csv", b"year,month,day\n")
    r = airflow(server.env, "dags", "reserialize")
    assert r.returncode == 0, r.stderr[-2000:]
    # One completed epoch of the flights plan, written through the library.
    c = Coordinator(LocalStorage(tmp / "ckpt"), "flights_daily")
    b = c.begin_epoch(plan_from_edges(EDGES, PUBLISHING), "scheduled__2013-01-02")
    for task in EDGES:
        ack_task(c, b.epoch_id, task, files={"state": task.encode()}, tmp=tmp)
    c.complete(b.epoch_id)
    server.start()
    try:
        yield server, tmp, c
    finally:
        server.stop()


@pytest.fixture
def cancel_backfills(af):
    yield
    server = af[0]
    for bf in server.get("/api/v2/backfills?dag_id=flights_daily").json()["backfills"]:
        if bf["completed_at"] is None:
            assert server.put(f"/api/v2/backfills/{bf['id']}/cancel").ok


def run_cli(server: Standalone, *args: str, user: str = "admin", **env: str):
    base = {**server.env, "AIRFLOW_API_URL": server.url,
            "AIRFLOW_API_TOKEN": server.token(user), **env}
    return subprocess.run([CKPT_AIRFLOW, *args], env=base, capture_output=True, text=True,
                          timeout=120)


def _db(tmp: Path):
    return sqlite3.connect(tmp / "airflow" / "airflow.db")


def _backfill_rows(tmp: Path) -> list:
    return _db(tmp).execute("select id from backfill where dag_id='flights_daily'").fetchall()


def test_backfill_from_epoch_creates_airflow_backfill_and_lineage(af, cancel_backfills):
    server, tmp, c = af
    r = run_cli(server, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                "--first-day", "2013-01-02", "--last-day", "2013-01-04")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    origin = read_origin(c.storage, c.layout, out["lineage"])
    assert (origin.from_epoch, origin.start, origin.end, origin.publish_at) == \
        (1, "2013-01-03", "2013-01-05", "2013-01-05")
    assert origin.requested_by == "admin"  # the token's user, as Airflow authenticated it
    (bf_id, conf, mar), = _db(tmp).execute(
        "select id, dag_run_conf, max_active_runs from backfill where id=?",
        (out["backfill_id"],))
    assert mar == 1 and json.loads(conf) == {"checkpoint": {"lineage": out["lineage"]}}
    runs = _db(tmp).execute("select logical_date, run_type, conf from dag_run where "
                            "dag_id='flights_daily' and run_type='backfill' and "
                            "logical_date < '2013-01-06' order by logical_date").fetchall()
    assert [r[0][:10] for r in runs] == ["2013-01-03", "2013-01-04", "2013-01-05"]
    assert all(json.loads(r[2])["checkpoint"]["lineage"] == out["lineage"] for r in runs)
    assert [x["logical_date"] for x in out["runs"]] == ["2013-01-03", "2013-01-04",
                                                       "2013-01-05"]


@pytest.mark.parametrize("args, message", [
    (["--from-epoch", "7"], "epoch 7 of flights_daily is unknown"),
    (["--from-savepoint", "nope"], "savepoint"),
])
def test_bad_backfill_request_is_one_line_and_records_nothing(af, args, message):
    server, tmp, c = af
    before, rows = list_origins(c.storage, c.layout), _backfill_rows(tmp)
    r = run_cli(server, "backfill", "--dag-id", "flights_daily", *args,
                "--first-day", "2013-01-08", "--last-day", "2013-01-09")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert list_origins(c.storage, c.layout) == before and _backfill_rows(tmp) == rows


def test_dry_run_previews_and_starts_nothing(af):
    server, tmp, c = af
    before, rows = list_origins(c.storage, c.layout), _backfill_rows(tmp)
    r = run_cli(server, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                "--first-day", "2013-01-08", "--last-day", "2013-01-09", "--dry-run")
    assert r.returncode == 0, r.stderr[-3000:]
    p = json.loads(r.stdout.strip().splitlines()[-1])
    assert p["runs"] == [{"logical_date": "2013-01-09", "data_day": "2013-01-08"},
                         {"logical_date": "2013-01-10", "data_day": "2013-01-09"}]
    assert p["origin"]["epoch_id"] == 1 and p["conflicts"] == []
    assert list_origins(c.storage, c.layout) == before and _backfill_rows(tmp) == rows
    # At a terminal (a pseudo-terminal here) the same preview is indented for a person.
    import os
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [CKPT_AIRFLOW, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
         "--first-day", "2013-01-08", "--last-day", "2013-01-09", "--dry-run"],
        env={**server.env, "AIRFLOW_API_URL": server.url,
             "AIRFLOW_API_TOKEN": server.token("admin")},
        stdout=follower, stderr=subprocess.PIPE)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        shown += chunk
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    text = shown.decode().replace("\r\n", "\n")
    assert text.startswith("{\n  ") and json.loads(text) == p, text[:400]


def test_backfill_over_a_run_in_flight_is_refused_naming_the_date(af):
    """Airflow would skip a date whose run is still in flight; the backfill would then never
    publish (its last date is the one that publishes): refused, nothing written."""
    server, tmp, c = af
    before, rows = list_origins(c.storage, c.layout), _backfill_rows(tmp)
    server.trigger("flights_daily", "2013-01-12T00:00:00Z")  # queued: no scheduler here
    r = run_cli(server, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                "--first-day", "2013-01-10", "--last-day", "2013-01-11")
    assert r.returncode == 2, r.stdout[-2000:]
    assert "would not run 2013-01-12" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert list_origins(c.storage, c.layout) == before and _backfill_rows(tmp) == rows


def test_backfill_airflow_refuses_leaves_no_lineage(af, cancel_backfills):
    server, tmp, c = af
    first = run_cli(server, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                    "--first-day", "2013-01-13", "--last-day", "2013-01-14")
    assert first.returncode == 0, first.stderr[-2000:]
    lineage = json.loads(first.stdout.strip().splitlines()[-1])["lineage"]
    assert json.loads(first.stdout.strip().splitlines()[-1])["runs"] == [
        {"logical_date": "2013-01-14", "data_day": "2013-01-13"},
        {"logical_date": "2013-01-15", "data_day": "2013-01-14"}]
    origins, rows = list_origins(c.storage, c.layout), _backfill_rows(tmp)
    assert lineage in [o.lineage for o in origins]
    # A second backfill while the first is active: Airflow refuses it.
    second = run_cli(server, "backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
                     "--first-day", "2013-01-16", "--last-day", "2013-01-17")
    assert second.returncode == 2 and "Airflow refused" in second.stderr, second.stderr
    assert "already a running backfill" in second.stderr, second.stderr
    assert list_origins(c.storage, c.layout) == origins and _backfill_rows(tmp) == rows


def test_rights_are_airflows_and_credentials_stay_out_of_flags(af):
    """A viewer may read the DAG but not backfill it: refused (403) by the plugin route;
    without credentials, or with a wrong password, the command says so in one line."""
    server, tmp, c = af
    before = list_origins(c.storage, c.layout)
    args = ("backfill", "--dag-id", "flights_daily", "--from-epoch", "1",
            "--first-day", "2013-01-16", "--last-day", "2013-01-17")
    r = run_cli(server, *args, user="viewer")
    assert r.returncode == 2 and "ckpt-airflow: error:" in r.stderr, r.stderr
    assert "forbidden" in r.stderr.lower(), r.stderr
    r = run_cli(server, *args, AIRFLOW_API_TOKEN="")
    assert r.returncode == 2 and "AIRFLOW_API_TOKEN" in r.stderr, r.stderr
    r = run_cli(server, *args, "--username", "admin", AIRFLOW_API_PASSWORD="wrong")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    # The right password, from the environment, works (a dry run: nothing started).
    r = run_cli(server, *args, "--dry-run", "--username", "admin",
                AIRFLOW_API_TOKEN="", AIRFLOW_API_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0, r.stderr
    assert list_origins(c.storage, c.layout) == before
    assert requests.get(f"{server.url}/api/v2/monitor/health", timeout=10).ok


def test_backfill_request_ids_are_strict():
    from dag_checkpoints.server.api import BackfillRequest, SavepointRequest
    from pydantic import ValidationError

    for bad in (True, "1", 1.0):
        with pytest.raises(ValidationError):
            BackfillRequest.model_validate({"from_epoch": bad, "first_day": "2013-01-02",
                                            "last_day": "2013-01-03"})
        with pytest.raises(ValidationError):
            SavepointRequest.model_validate({"name": "sp", "epoch_id": bad})
    ok = BackfillRequest.model_validate({"from_epoch": 2, "first_day": "2013-01-02",
                                         "last_day": "2013-01-03"})
    assert ok.from_epoch == 2
