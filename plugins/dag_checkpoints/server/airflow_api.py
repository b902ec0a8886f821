"""Airflow's public REST API (``/api/v2``), as the plugin and ``ckpt-airflow`` call it.

Backfills go through Airflow's own routes (``POST /api/v2/backfills`` and its ``/dry_run``)
with the caller's token: Airflow applies that user's rights on backfills of the DAG, and
nothing here depends on Airflow's internal functions or its database.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlencode

import requests


class AirflowApiError(RuntimeError):
    """Airflow answered a request with an error: ``status`` and Airflow's own detail."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status

    @property
    def database_error(self) -> bool:
        """Airflow's 500 "Database error": on SQLite, a write that waited past the busy
        timeout while another component held the lock."""
        return self.status == 500 and "Database error" in str(self)


#: Pauses (s) while looking for a backfill Airflow committed but has not shown yet.
VISIBLE_AFTER = (0.0, 0.5, 1.0, 2.0, 4.0)
#: Pauses (s) before a run's state change refused with "Database error" is sent again.
RUN_STATE_PAUSES = (1.0, 2.0)


def _session() -> requests.Session:
    """A session that asks again when Airflow answers 503 (on SQLite, Airflow refuses a
    backfill while its scheduler holds the database: "Database is locked"), after 0.5, 1
    and 2 s, as urllib3's Retry does; a request that reached Airflow and timed out is not
    sent twice."""
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    http = requests.Session()
    retry = Retry(total=3, connect=2, read=0, status=3, status_forcelist=(503,),
                  allowed_methods=None, backoff_factor=0.5, raise_on_status=False)
    http.mount("http://", HTTPAdapter(max_retries=retry))
    http.mount("https://", HTTPAdapter(max_retries=retry))
    return http


def _midnight(d: date) -> str:
    return datetime(d.year, d.month, d.day, tzinfo=UTC).isoformat()


@dataclass(frozen=True)
class AirflowApi:
    """A caller of Airflow's REST API at ``base_url`` with ``headers`` (its token)."""

    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 60.0

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url.rstrip('/')}{path}"
        try:
            with _session() as http:
                r = http.request(method, url, json=body, headers=self.headers,
                                 timeout=self.timeout)
        except requests.RequestException as exc:
            raise AirflowApiError(f"Airflow's API at {self.base_url} is unreachable: "
                                  f"{type(exc).__name__}", 503) from None
        if r.status_code >= 400:
            raise AirflowApiError(_detail(r), r.status_code)
        return r.json()

    def _backfill_body(self, dag_id: str, first: date, last: date,
                       conf: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"dag_id": dag_id, "from_date": _midnight(first), "to_date": _midnight(last),
                "run_backwards": False,  # oldest first: each epoch restores from the one before
                # Dates that already ran are run again, on the new lineage.
                "reprocess_behavior": "completed",
                "max_active_runs": 1, "dag_run_conf": conf}

    def backfill_dry_run(self, dag_id: str, first: date, last: date) -> list[date]:
        """The logical dates of ``first``..``last`` Airflow would run in a backfill."""
        out = self.call("POST", "/api/v2/backfills/dry_run",
                        self._backfill_body(dag_id, first, last))
        return sorted(datetime.fromisoformat(b["logical_date"]).date()
                      for b in out["backfills"] if b.get("logical_date"))

    def set_run_state(self, dag_id: str, run_id: str, state: str) -> str:
        """Set a DAG run's state (``failed``: Airflow stops its running tasks and skips the
        rest); the run's state afterwards.

        On SQLite, Airflow answers 500 "Database error" when the request's audit log insert,
        which comes before the change, waited past the database's busy timeout (another
        component held the lock for 30 s under load): nothing was changed, and the request,
        which sets a state and so may be repeated, is sent again (:data:`RUN_STATE_PAUSES`)."""
        from urllib.parse import quote

        path = f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}"
        for pause in RUN_STATE_PAUSES:
            try:
                return str(self.call("PATCH", path, {"state": state}).get("state"))
            except AirflowApiError as exc:
                if not exc.database_error:
                    raise
            time.sleep(pause)
        return str(self.call("PATCH", path, {"state": state}).get("state"))

    def create_backfill(self, dag_id: str, first: date, last: date,
                        conf: dict[str, Any]) -> int:
        """Create the backfill (one run at a time, oldest first); its id.

        On SQLite, Airflow may answer 503 ("database is locked") to a request: it commits
        the backfill before creating its runs, and when the runs meet the lock it removes
        the backfill again (best effort: the removal may land seconds later, or never).
        The session asks again, and Airflow may refuse that second request with 409,
        "already a running backfill", because of the first one's backfill. Airflow may
        also answer 500 "Database error" when its audit log's insert, after the
        backfill's own, meets the lock. In both cases the backfill started with this
        request's conf (its lineage is unique) is looked for, and taken only once its
        runs exist: one without runs is the first request's, being removed, and the
        request is sent again when it is gone."""
        body = self._backfill_body(dag_id, first, last, conf)
        for pause in (0.5, 1.0, 2.0, 4.0, None):
            try:
                return int(self.call("POST", "/api/v2/backfills", body)["id"])
            except AirflowApiError as exc:
                if exc.status == 409 and "already a running backfill" in str(exc):
                    mine, others = self._await_running_backfill(dag_id, conf)
                    if mine is None and (others or pause is None):
                        raise
                elif exc.database_error and pause:
                    time.sleep(pause)
                    mine, _ = self._running_backfills(dag_id, conf)
                else:
                    raise
                if mine is not None and self._has_runs(dag_id, mine, first, last, conf):
                    return mine
                if pause is None:
                    raise
                # No backfill of this request, or one Airflow is removing: ask again.
        raise AssertionError("unreachable")  # the last pass returns or raises

    def _has_runs(self, dag_id: str, backfill_id: int, first: date, last: date,
                  conf: dict[str, Any]) -> bool:
        """Whether backfill ``backfill_id`` has its runs (Airflow creates them in the
        request that creates it, or removes it): False once it is gone. A backfill that
        stays without runs was left by a removal that failed; Airflow's scheduler marks
        it completed two minutes after its creation, and until then it holds the DAG."""
        runs = f"/api/v2/dags/{dag_id}/dagRuns?" + urlencode(
            {"run_type": "backfill", "limit": 100, "logical_date_gte": _midnight(first),
             "logical_date_lte": _midnight(last)})
        for pause in VISIBLE_AFTER:
            time.sleep(pause)
            try:
                self.call("GET", f"/api/v2/backfills/{backfill_id}")
            except AirflowApiError as exc:
                if exc.status == 404:
                    return False
                raise
            if any(_started_with(r.get("conf"), conf)
                   for r in self.call("GET", runs).get("dag_runs", [])):
                return True
        raise AirflowApiError(f"Airflow kept backfill {backfill_id} of {dag_id} without its "
                              "runs (its database was locked); it releases the DAG within "
                              "two minutes: ask again then", 503)

    def _await_running_backfill(self, dag_id: str, conf: dict[str, Any]
                                ) -> tuple[int | None, int]:
        # The first request's backfill may become visible a moment after the refusal
        # of the second (its transaction still committing on a locked SQLite).
        for pause in VISIBLE_AFTER:
            time.sleep(pause)
            mine, others = self._running_backfills(dag_id, conf)
            if mine is not None:
                return mine, others
        return None, others

    def _running_backfills(self, dag_id: str, conf: dict[str, Any]) -> tuple[int | None, int]:
        """(the running backfill of ``dag_id`` started with ``conf``, how many others of
        it are running)."""
        out = self.call("GET", f"/api/v2/backfills?dag_id={dag_id}&limit=100")
        mine, others = None, 0
        for b in out.get("backfills", []):
            if b.get("completed_at") is not None:
                continue
            if _started_with(b.get("dag_run_conf"), conf):
                mine = int(b["id"])
            else:
                others += 1
        return mine, others


def _started_with(theirs: dict[str, Any] | None, conf: dict[str, Any]) -> bool:
    """Whether a backfill or run whose conf is ``theirs`` was started with ``conf``: the
    same checkpoint lineage (unique per backfill) when ``conf`` names one, else the same
    conf."""
    theirs = theirs or {}
    lineage = (conf.get("checkpoint") or {}).get("lineage")
    if lineage:
        return (theirs.get("checkpoint") or {}).get("lineage") == lineage
    return theirs == conf


def _detail(r: requests.Response) -> str:
    """Airflow's error detail in one line."""
    try:
        detail = r.json().get("detail", r.text)
    except ValueError:
        detail = r.text
    if isinstance(detail, list):  # a validation error: [{"msg": ...}, ...]
        detail = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d)
                           for d in detail)
    return " ".join(str(detail).split())[:300] or f"HTTP {r.status_code}"
