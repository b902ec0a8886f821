"""Airflow's REST API as the provider calls it: retries, refusals kept apart, requests
found or asked again."""

from __future__ import annotations

import pytest


def test_airflow_api_asks_again_when_airflow_is_unavailable():
    """Airflow answers 503 while SQLite is locked ("Database is locked"): the call asks
    again (twice here) and gets the answer; a 503 that lasts is Airflow's error, once."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from dag_checkpoints.server.airflow_api import AirflowApi, AirflowApiError

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            seen.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            locked = self.path == "/api/v2/locked" or len(seen) <= 2
            body = json.dumps({"detail": "Database is locked"} if locked else {"id": 7})
            self.send_response(503 if locked else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
    try:
        assert api.call("POST", "/api/v2/backfills", {}) == {"id": 7}
        assert len(seen) == 3
        seen.clear()
        with pytest.raises(AirflowApiError, match="Database is locked") as err:
            api.call("POST", "/api/v2/locked", {})
        assert err.value.status == 503 and len(seen) == 4  # the first try and 3 more
    finally:
        server.shutdown()


@pytest.mark.parametrize(("airflow", "ours"), [(400, 409), (409, 409), (401, 401), (403, 403),
                                               (503, 503), (500, 502), (504, 502)])
def test_airflow_refusals_of_a_backfill_keep_their_kind(airflow, ours):
    """Airflow refusing the range is a conflict; its own failure (500) is not one: the
    request may be fine, so the answer says the gateway failed."""
    from dag_checkpoints.server.airflow_api import AirflowApiError
    from dag_checkpoints.server.backfill import _status

    assert _status(AirflowApiError("no", airflow)) == ours


def _fake_airflow(answers: list[tuple[int, dict]], backfills: list[dict],
                  with_runs: set[int] | None = None):
    """An HTTP server answering POST /api/v2/backfills from ``answers`` in turn, GET
    /api/v2/backfills with ``backfills`` (a list the test may change), GET
    /api/v2/backfills/<id> from it, and a DAG's backfill runs: one per backfill of
    ``with_runs`` (default: all), carrying its conf. Airflow's answers under a locked
    SQLite, which cannot be provoked on purpose."""
    import json as _json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from urllib.parse import urlsplit

    posts: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict) -> None:
            data = _json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802 - http.server's name
            posts.append(_json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self._send(*answers.pop(0))

        do_PATCH = do_POST  # noqa: N815 - a run's state change, answered the same way

        def do_GET(self):  # noqa: N802
            path = urlsplit(self.path).path
            if path == "/api/v2/backfills":
                self._send(200, {"backfills": backfills})
            elif path.startswith("/api/v2/backfills/"):
                found = [b for b in backfills if str(b["id"]) == path.rsplit("/", 1)[1]]
                if found:
                    self._send(200, found[0])
                else:
                    self._send(404, {"detail": "gone"})
            elif path.endswith("/dagRuns"):
                self._send(200, {"dag_runs": [
                    {"conf": b["dag_run_conf"]} for b in backfills
                    if with_runs is None or b["id"] in with_runs]})
            else:
                self._send(404, {"detail": path})

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, posts


@pytest.mark.parametrize("committed", [True, False])
def test_a_backfill_refused_with_a_database_error_is_found_or_asked_again(committed):
    """Airflow answers 500 "Database error" when its audit log's insert meets SQLite's
    lock: the backfill it may have committed is found by its lineage, else asked again."""
    from datetime import date

    from dag_checkpoints.server.airflow_api import AirflowApi

    conf = {"checkpoint": {"lineage": "bf-1"}}
    error = (500, {"detail": {"reason": "Database error", "message": "Serious error"}})
    mine = {"id": 7, "completed_at": None, "dag_run_conf": conf}
    other = {"id": 3, "completed_at": None, "dag_run_conf": {"checkpoint": {"lineage": "x"}}}
    server, posts = _fake_airflow([error, (200, {"id": 8})],
                                  [other, mine] if committed else [other])
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        got = api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
    finally:
        server.shutdown()
    assert got == (7 if committed else 8)
    assert len(posts) == (1 if committed else 2)
    assert all(p["dag_run_conf"] == conf for p in posts)


@pytest.mark.parametrize("refusals", [1, 3])
def test_a_run_state_change_refused_with_a_database_error_is_sent_again(refusals,
                                                                       monkeypatch):
    """The abort route fails the epoch's run through Airflow's API: a change that Airflow
    refused with 500 "Database error" (its audit log's insert met SQLite's lock, nothing
    changed) is sent again, twice at most; the third refusal is the answer."""
    from dag_checkpoints.server import airflow_api
    from dag_checkpoints.server.airflow_api import AirflowApi, AirflowApiError

    monkeypatch.setattr(airflow_api, "RUN_STATE_PAUSES", (0.0, 0.0))
    error = (500, {"detail": {"reason": "Database error", "message": "Serious error"}})
    server, sent = _fake_airflow([error] * refusals + [(200, {"state": "failed"})], [])
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        if refusals < 3:
            assert api.set_run_state("d", "manual__2024-01-02T00:00:00+00:00",
                                     "failed") == "failed"
        else:
            with pytest.raises(AirflowApiError, match="Database error"):
                api.set_run_state("d", "manual__2024-01-02T00:00:00+00:00", "failed")
    finally:
        server.shutdown()
    assert sent == [{"state": "failed"}] * min(refusals + 1, 3)


@pytest.mark.parametrize("running", ["none", "mine", "another"])
def test_a_backfill_refused_as_already_running_is_found_or_asked_again(running, monkeypatch):
    """After a 503, Airflow may refuse the session's second request with 409 because of the
    first one's backfill, which it commits and then removes: this request's backfill is
    found by its lineage; when no backfill runs any more the request is sent again; another
    backfill of the DAG still running is the user's conflict, answered as such."""
    from datetime import date

    from dag_checkpoints.server import airflow_api
    from dag_checkpoints.server.airflow_api import AirflowApi, AirflowApiError

    monkeypatch.setattr(airflow_api, "VISIBLE_AFTER", (0.0, 0.0))
    conf = {"checkpoint": {"lineage": "bf-2"}}
    refused = (409, {"detail": "There is already a running backfill for dag d"})
    listed = {"none": [{"id": 4, "completed_at": "2024-01-01T00:00:00Z",
                        "dag_run_conf": conf}],
              "mine": [{"id": 5, "completed_at": None, "dag_run_conf": conf}],
              "another": [{"id": 6, "completed_at": None,
                           "dag_run_conf": {"checkpoint": {"lineage": "x"}}}]}[running]
    server, posts = _fake_airflow([refused, (200, {"id": 9})], listed)
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        if running == "another":
            with pytest.raises(AirflowApiError, match="already a running backfill"):
                api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
        else:
            got = api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
            assert got == {"none": 9, "mine": 5}[running]
    finally:
        server.shutdown()
    assert len(posts) == {"none": 2, "mine": 1, "another": 1}[running]


@pytest.mark.parametrize("fate", ["removed", "kept"])
def test_a_backfill_found_without_runs_is_not_taken(fate, monkeypatch):
    """The first request's backfill, found after the 409, has no runs: Airflow's removal of
    it may land seconds later. Taking its id left a backfill that never ran, and main runs
    waiting for it. Removed, the request is sent again; kept without runs (the removal
    failed), the caller is told to ask again once Airflow releases the DAG."""
    import threading
    from datetime import date

    from dag_checkpoints.server import airflow_api
    from dag_checkpoints.server.airflow_api import AirflowApi, AirflowApiError

    monkeypatch.setattr(airflow_api, "VISIBLE_AFTER", (0.0, 0.2, 0.2, 0.2))
    conf = {"checkpoint": {"lineage": "bf-3"}}
    refused = (409, {"detail": "There is already a running backfill for dag d"})
    backfills = [{"id": 1, "completed_at": None, "dag_run_conf": conf}]
    server, posts = _fake_airflow([refused, (200, {"id": 2})], backfills, with_runs=set())
    if fate == "removed":  # Airflow's late removal of the orphan
        threading.Timer(0.3, backfills.clear).start()
    try:
        api = AirflowApi(f"http://127.0.0.1:{server.server_port}")
        if fate == "kept":
            with pytest.raises(AirflowApiError, match="without its runs") as err:
                api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf)
            assert err.value.status == 503
        else:
            assert api.create_backfill("d", date(2024, 1, 1), date(2024, 1, 2), conf) == 2
    finally:
        server.shutdown()
    assert len(posts) == {"removed": 2, "kept": 1}[fate]
