"""REST API of the plugin (mounted by the api-server under ``/ckpt``): epochs, savepoints,
backfill from an epoch, and the Epochs page. Every route depends on Airflow's auth
manager: no or a bad token gives 401/403, and rights are those on the DAG (reading needs
GET on the DAG, actions need PUT/POST), so a plugin route is never an open door.

Each DAG's checkpoint settings (storage, pipeline id, policies) come from the DAG itself,
as Airflow serialized its begin step (:mod:`.deployed`), not from the api-server's
environment. Answers never carry a storage path; request bodies with unknown fields are
refused (422); what does not exist is a 404.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Literal
from urllib.parse import urlsplit

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from checkpointing import Coordinator, create_savepoint
from checkpointing.errors import (
    CheckpointError,
    EpochNotFound,
    InvalidId,
    MalformedDocument,
    SavepointExists,
    SavepointNotFound,
    StorageError,
)
from checkpointing.ids import ID_PATTERN
from checkpointing.protocol.epoch_metadata import AbortReason
from checkpointing.redaction import redact
from checkpointing.views.listing import list_epochs, listing_row
from checkpointing.views.stats import epoch_or_history_stats

from ..hooks.checkpoint import CheckpointHook
from ..shared.settings import CheckpointSettings
from .airflow_api import AirflowApi, AirflowApiError
from .backfill import (
    BackfillRequestError,
    airflow_preview,
    start_backfill,
)
from .deployed import deployed_settings
from .task_tries import task_tries

DagId = Path(pattern=ID_PATTERN, max_length=200, description="DAG id (= pipeline id)")
EpochId = Path(ge=1, le=10**10 - 1)

app = FastAPI(
    title="DAG checkpoints",
    version="1.2",
    description="Epochs (DAG-level checkpoints), savepoints and backfills from a checkpoint. "
                "Authenticate as for Airflow's REST API (Bearer JWT or the UI's session).",
    # No Swagger/ReDoc pages: they load their assets from a CDN and would be open without
    # sign-in. The schema stays at /ckpt/openapi.json.
    docs_url=None, redoc_url=None,
)

_MAX_ERRORS, _MAX_MSG = 10, 300


@app.exception_handler(RequestValidationError)
async def _bounded_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """A 422 names what is wrong, never echoes the request (a 10 MB body stays server-side)."""
    errors = [{"loc": [str(x)[:100] for x in e.get("loc", ())][:8],
               "msg": str(e.get("msg", ""))[:_MAX_MSG], "type": str(e.get("type", ""))[:60]}
              for e in exc.errors()[:_MAX_ERRORS]]
    return JSONResponse({"detail": errors, "errors_total": len(exc.errors())}, status_code=422)


class _Body(BaseModel):
    """Request bodies refuse fields they do not know: a misspelt option is an error (422),
    never silently ignored."""

    model_config = ConfigDict(extra="forbid")


class SavepointRequest(_Body):
    name: str = Field(pattern=ID_PATTERN, max_length=200)
    epoch_id: StrictInt | None = Field(default=None, ge=1, le=10**10 - 1,
                                       description="default: latest of main")


class AbortRequest(_Body):
    reason: str = Field(min_length=1, max_length=300, description="recorded in _metadata")
    fail_run: bool = Field(default=True, description="also mark the epoch's DAG run failed "
                           "(through Airflow's API, with your rights), which stops its "
                           "running tasks and lets the next queued run start")


class BackfillRequest(_Body):
    from_epoch: StrictInt | None = Field(default=None, ge=1, le=10**10 - 1)
    from_savepoint: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    first_day: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$",
                           description="first data day (day of input) to replay")
    last_day: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$",
                          description="last data day to replay")
    rewind: bool = Field(default=False, description="allow publishing older data than is "
                         "published now")
    dry_run: bool = Field(default=False, description="answer the preview, start nothing")

    @model_validator(mode="after")
    def _one_origin(self) -> BackfillRequest:
        if (self.from_epoch is None) == (self.from_savepoint is None):
            raise ValueError("give exactly one of from_epoch and from_savepoint")
        return self


def _settings(dag_id: str) -> CheckpointSettings:
    """The DAG's own checkpoint settings, as deployed (404 for a DAG without checkpoints)."""
    settings = deployed_settings(dag_id)
    if settings is None:
        raise HTTPException(404, f"DAG {dag_id!r} is not checkpointed (it has no "
                                 "checkpoint_begin step)")
    return settings


#: (storage, pipeline id, dag id) whose owner in the registry is that DAG: an owner, once
#: recorded, never changes, so each is checked once per api-server, not on every refresh
_OWNED: set[tuple[str, str, str]] = set()


def _coordinator(dag_id: str) -> Coordinator:
    settings = _settings(dag_id)
    key = (settings.storage, settings.pipeline_id, dag_id)
    try:
        coord = CheckpointHook(settings).get_coordinator()
        owner = dag_id if key in _OWNED else coord.registry().owner
    except (ValueError, InvalidId) as exc:
        raise HTTPException(400, redact(str(exc), settings.storage)) from None
    except CheckpointError as exc:
        raise HTTPException(503, "checkpoint storage: "
                                 + redact(str(exc), settings.storage)) from None
    if owner is not None and owner != dag_id:
        raise HTTPException(409, f"pipeline {coord.pipeline_id!r} of DAG {dag_id!r} is "
                                 f"checkpointed by DAG {owner!r} on the same storage")
    if owner == dag_id:
        _OWNED.add(key)
    return coord


def _public_barrier(barrier: Any) -> dict[str, Any]:
    """The barrier as an answer: a table input is named by its format and table (the last
    segment of its location, or its catalog identifier), never by where it lives."""
    from checkpointing.protocol.table_inputs import TableInput

    doc = barrier.to_json()
    for task in doc["plan"].values():
        if task.get("table_inputs"):
            task["table_inputs"] = {
                name: {"format": spec["format"], "table": TableInput.from_json(spec).label}
                for name, spec in task["table_inputs"].items()}
    return doc


def _storage_errors(exc: Exception, coord: Coordinator | None = None) -> HTTPException:
    msg = str(exc)
    if coord is not None:
        msg = redact(msg, *coord.catalog.storage_locations)
    if isinstance(exc, (EpochNotFound, SavepointNotFound)):
        return HTTPException(404, msg)
    if isinstance(exc, MalformedDocument):
        return HTTPException(409, msg)
    if isinstance(exc, StorageError):
        return HTTPException(503, f"checkpoint storage: {msg}")
    return HTTPException(400, msg)


def _dag_exists(session: SessionDep, dag_id: str = DagId) -> None:
    """404 for a DAG Airflow does not know, as Airflow's own API answers."""
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    if session.scalar(select(DagModel.dag_id).where(DagModel.dag_id == dag_id)) is None:
        raise HTTPException(404, f"The Dag with ID: `{dag_id}` was not found")


READ = [Depends(requires_access_dag("GET")), Depends(_dag_exists)]
WRITE = [Depends(requires_access_dag("PUT")), Depends(_dag_exists)]


@app.get("/api/dags/{dag_id}/epochs", dependencies=READ, summary="Epochs, newest first")
def get_epochs(dag_id: str = DagId, limit: int = Query(50, ge=1, le=500),
               offset: int = Query(0, ge=0, le=10**10),
               lineage: str | None = Query(None, pattern=ID_PATTERN)) -> dict[str, Any]:
    """Epochs with files and epochs kept in the history after retention (``source``:
    ``epoch``, ``history`` or ``damaged``), newest first, ``offset`` rows skipped;
    ``total`` counts every epoch that matches, ``counts`` by status; ``tables``: the table
    version each table output got from the epoch; ``last_completed_age_seconds``: since
    the main lineage's last completed epoch; ``stale``: when that epoch is older than the
    configured ``max_epoch_age_seconds``, since when and whether the alert was sent.
    Decided epochs come from their summaries (PROTOCOL 5.7) and this server's cache of
    them."""
    coord = _coordinator(dag_id)
    try:
        listing = list_epochs(coord, limit=limit, lineage=lineage, per_task=True,
                              offset=offset, count=True)
        manifest = coord.catalog.manifest()
        # the per-task rows are the detail route's
        rows = [listing_row(st, manifest) for st in listing.rows]
        age = coord.records.last_completed_age()
        # Read again only when the age says stale: the page asks every 15 s.
        max_age = coord.config.max_epoch_age_seconds
        stale = coord.records.staleness() if age is not None and max_age is not None \
            and age > max_age else None
        return {"dag_id": dag_id, "latest_completed": coord.latest_completed(),
                "last_completed_age_seconds": None if age is None else round(age, 1),
                "stale": None if stale is None else {
                    "since": stale.since, "last_epoch_id": stale.last_epoch_id,
                    "alerted": stale.alerted,
                    "max_epoch_age_seconds": coord.config.max_epoch_age_seconds},
                "counts": listing.counts, "epochs": rows, "total": listing.total,
                "offset": offset, "limit": limit}
    except CheckpointError as exc:
        raise _storage_errors(exc, coord) from None


@app.get("/api/dags/{dag_id}/epochs/{epoch_id}", dependencies=READ,
         summary="One epoch with per-task statistics")
def get_epoch(session: SessionDep, dag_id: str = DagId,
              epoch_id: int = EpochId) -> dict[str, Any]:
    """``tasks[].failed_tries``: Airflow's failed tries of each task (failed, up for retry),
    with their start and end after the barrier."""
    coord = _coordinator(dag_id)
    try:
        stats = epoch_or_history_stats(coord, epoch_id, per_task=True)
        st = stats.to_json()
        _add_tries(st, session, dag_id)
        alert = coord.catalog.alert(epoch_id)
        st["alert"] = alert.to_json() if alert else None
        st["barrier"] = _public_barrier(coord.barrier(epoch_id)) \
            if stats.source == "epoch" else None
        # "epoch 12: gold_route_stats v12": the table versions it published (6.12)
        st["tables"] = coord.catalog.published_tables(epoch_id) or stats.tables
        return st
    except CheckpointError as exc:
        raise _storage_errors(exc, coord) from None


def _add_tries(st: dict[str, Any], session: Any, dag_id: str) -> None:
    """Each task's failed tries, from Airflow's database (the acknowledged attempt is
    drawn from its handle's timings; a try that succeeded without acknowledging, such as a
    cleared task that found its acknowledgement, failed nothing)."""
    from datetime import datetime

    if not st.get("run_id") or not st.get("created_at"):
        return
    since = datetime.fromisoformat(st["created_at"])
    tries = task_tries(session, dag_id, st["run_id"])
    for t in st["tasks"]:
        t["failed_tries"] = [x.to_json(since) for x in tries.get(t["task_id"], [])
                             if x.failed and x.attempt != t.get("acked_attempt")]


@app.post("/api/dags/{dag_id}/epochs/{epoch_id}/abort", dependencies=WRITE,
          summary="Abort a pending epoch and (by default) fail its DAG run")
def post_abort(body: AbortRequest, user: GetUserDep, request: Request, dag_id: str = DagId,
               epoch_id: int = EpochId) -> dict[str, Any]:
    """Abort the epoch (reason ``cancelled``: it does not spend the failure budget); with
    ``fail_run`` (default) also mark its DAG run failed through Airflow's own API with the
    caller's token, so that its running tasks stop and the next queued run starts now
    instead of when the epoch's watchdog or the tasks notice."""
    coord = _coordinator(dag_id)
    try:
        status = coord.status(epoch_id)
        if status == "unknown":
            raise HTTPException(404, f"epoch {epoch_id} of DAG {dag_id!r} does not exist")
        if status != "pending":
            raise HTTPException(409, f"epoch {epoch_id} is {status}; only a pending epoch "
                                     "can be aborted")
        try:
            barrier = coord.barrier(epoch_id)
        except EpochNotFound:  # an id allocated by a try that died before its barrier
            barrier = None
        meta = coord.abort(epoch_id, AbortReason.CANCELLED,
                           f"aborted by {user.get_name()}: {body.reason}")
    except CheckpointError as exc:
        raise _storage_errors(exc, coord) from None
    run = {"run_id": barrier.run_id if barrier else None, "state": None}
    if body.fail_run and barrier is not None and meta.status == "aborted":
        run["state"] = _fail_run(_airflow_api(request), dag_id, barrier.run_id)
    return {"epoch_id": epoch_id, "status": meta.status, "reason": meta.reason,
            "detail": meta.detail, "missing_tasks": list(meta.missing_tasks), "dag_run": run}


def _fail_run(api: AirflowApi, dag_id: str, run_id: str) -> str:
    """Mark the run failed (Airflow kills its running tasks and skips the rest); the run's
    state afterwards, or why Airflow refused."""
    try:
        return api.set_run_state(dag_id, run_id, "failed")
    except AirflowApiError as exc:
        return f"not changed: {exc}"


@app.get("/api/dags/{dag_id}/savepoints", dependencies=READ, summary="Savepoints")
def get_savepoints(dag_id: str = DagId) -> dict[str, Any]:
    coord = _coordinator(dag_id)
    try:
        return {"savepoints": [{"name": s.name, "epoch_id": s.epoch_id, "lineage": s.lineage,
                                "created_at": s.created_at}
                               for s in coord.catalog.savepoints()]}
    except CheckpointError as exc:
        raise _storage_errors(exc, coord) from None


@app.post("/api/dags/{dag_id}/savepoints", dependencies=WRITE, status_code=201,
          summary="Take a savepoint of a completed epoch")
def post_savepoint(body: SavepointRequest, dag_id: str = DagId) -> dict[str, Any]:
    coord = _coordinator(dag_id)
    try:
        if body.epoch_id is not None and coord.status(body.epoch_id) == "unknown":
            raise HTTPException(404, f"epoch {body.epoch_id} of DAG {dag_id!r} does not exist")
        sp = create_savepoint(coord, body.name, body.epoch_id)
    except SavepointExists as exc:
        raise HTTPException(409, str(exc)) from None
    except CheckpointError as exc:
        raise _storage_errors(exc, coord) from None
    return {"name": sp.name, "epoch_id": sp.epoch_id, "lineage": sp.lineage,
            "created_at": sp.created_at}


@app.get("/api/dags/{dag_id}/lineages", dependencies=READ, summary="Backfill lineages")
def get_lineages(dag_id: str = DagId) -> dict[str, Any]:
    coord = _coordinator(dag_id)
    try:
        manifest = coord.catalog.manifest()
        lineages = []
        for o in coord.catalog.origins():
            rec = coord.catalog.promotion(o.lineage)
            lineages.append({**o.to_json(), "promotion": rec.to_json() if rec else None})
        return {"lineages": lineages, "main_latest": coord.latest_completed(),
                "published": None if manifest is None else
                {"epoch_id": manifest.epoch_id, "lineage": manifest.lineage,
                 "published_at": manifest.published_at}}
    except CheckpointError as exc:
        raise _storage_errors(exc, coord) from None


@app.post("/api/dags/{dag_id}/backfills", dependencies=WRITE, status_code=201,
          summary="Backfill data days starting from an epoch or a savepoint (or preview it)")
def post_backfill(body: BackfillRequest, user: GetUserDep, request: Request,
                  response: Response, dag_id: str = DagId) -> dict[str, Any]:
    coord = _coordinator(dag_id)
    api = _airflow_api(request)
    try:
        if body.dry_run:
            response.status_code = 200
            return airflow_preview(coord, api, dag_id, body.first_day, body.last_day,
                                   rewind=body.rewind, from_epoch=body.from_epoch,
                                   from_savepoint=body.from_savepoint).to_json()
        started = start_backfill(coord, api, dag_id, body.first_day, body.last_day,
                                 requested_by=user.get_name(), rewind=body.rewind,
                                 from_epoch=body.from_epoch,
                                 from_savepoint=body.from_savepoint)
    except BackfillRequestError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    except CheckpointError as exc:
        raise _storage_errors(exc, coord) from None
    return started.to_json()


def _airflow_api(request: Request) -> AirflowApi:
    """Airflow's REST API of this api-server, called with the caller's own token (header,
    or the UI's cookie), so that Airflow checks the caller's rights on the backfill."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.configuration import conf

    configured = conf.get("api", "base_url", fallback=None) or ""
    # The address this connection reached the server on: always this api-server, also
    # behind a proxy or a container's port mapping, where base_url is the outside's. The
    # server serves its API under base_url's path (its root_path), so the loopback keeps it.
    server = request.scope.get("server")
    if server and server[1]:
        host = f"[{server[0]}]" if ":" in server[0] else server[0]
        base = f"{request.url.scheme}://{host}:{server[1]}{urlsplit(configured).path}"
    else:
        base = configured or f"{request.url.scheme}://{request.url.netloc}"
    auth = request.headers.get("authorization")
    if not auth and (cookie := request.cookies.get(COOKIE_NAME_JWT_TOKEN)):
        auth = f"Bearer {cookie}"
    return AirflowApi(base, {"Authorization": auth} if auth else {})


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("ui", name).read_text(encoding="utf-8")


@app.get("/ui/{dag_id}", response_class=HTMLResponse, dependencies=READ,
         summary="The Epochs page (embedded in the DAG view)")
def epochs_page(dag_id: str = DagId) -> HTMLResponse:
    page = _asset("epochs.html").replace("__DAG_ID__", dag_id)
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})


@app.get("/ui/static/{name}", summary="Page assets (served here: the page works offline)")
def static_asset(name: Literal["epochs.js", "epochs.css"]) -> Response:
    media = "text/javascript" if name.endswith(".js") else "text/css"
    return Response(_asset(name), media_type=media)
