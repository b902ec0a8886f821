"""Backfill from a checkpoint (Flink's ``-s <savepoint>`` restore, for a range of days).

A backfill is asked for in **data days**: the first and the last day of input it replays.
A run consumes the input dated before its logical date (``JobRun.input_until``: Airflow 3's
data interval of a daily DAG is zero-length at the logical date), so the run that replays
data day D has logical date D + 1; the answer lists every run with its logical date and
the data day it consumes.

It starts at a completed epoch or a savepoint and replays the days through Airflow's own
backfill machinery (one run at a time, oldest first). Its epochs form a new lineage, whose
origin record is written first; the begin step of each run reads the lineage from the
run's conf, restores along the chain and publishes only at the last day. A preview (dry
run) says all that without starting anything, and what will be published compared with
what is published now; a backfill that would publish older data than is published now is
refused unless asked to rewind.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from checkpointing import Barrier, Coordinator, Storage, TaskPlan
from checkpointing.errors import CheckpointError
from checkpointing.ids import validate_epoch_id, validate_id
from checkpointing.protocol.barrier import plan_from_json
from checkpointing.records.backfill_lineages import LineageOrigin, new_origin
from checkpointing.records.two_phase_publish import table_versions

from ..hooks.checkpoint import CheckpointHook
from ..shared.expected_inputs import expected_keys
from .airflow_api import AirflowApi, AirflowApiError

#: The most runs one backfill may ask for (a year of daily runs): a preview lists every
#: run, and Airflow creates them all at once; split longer ranges.
MAX_BACKFILL_RUNS = 366
#: How many items a conflict names before it summarises the rest as a count.
_NAMED = 5


def _summarise(items: list[str], n: int = _NAMED) -> str:
    """``a, b, c and 12 more``: a conflict stays one short line however long the range."""
    head = ", ".join(items[:n])
    return head + (f" and {len(items) - n} more" if len(items) > n else "")


class BackfillRequestError(ValueError):
    """The request cannot start a backfill: ``status`` 400 for a bad request (range, unknown
    epoch), 409 when Airflow's state refuses it (a date in flight, another backfill)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class BackfillRun:
    """One run of a backfill: its logical date and the data day it consumes."""

    logical_date: str
    data_day: str

    def to_json(self) -> dict[str, str]:
        return {"logical_date": self.logical_date, "data_day": self.data_day}


@dataclass(frozen=True)
class BackfillPreview:
    """What a backfill would do (nothing is started to compute it)."""

    first_day: str
    last_day: str
    origin: dict[str, Any]  # from_epoch | from_savepoint, epoch_id, frontier
    runs: tuple[BackfillRun, ...]
    published_now: dict[str, Any] | None  # epoch_id, lineage, frontier, rows per output
    #: frontier (the last day) and whether the main line then continues from it
    published_after: dict[str, Any]
    rewinds: bool
    #: why it cannot start as asked (refusals), and what the user should know (notes)
    conflicts: tuple[str, ...]
    notes: tuple[str, ...]
    #: the deployed plan against the origin's (added/removed/changed tasks); None when the
    #: deployed DAG was not known
    plan_change: dict[str, list[str]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"first_day": self.first_day, "last_day": self.last_day, "origin": self.origin,
                "runs": [r.to_json() for r in self.runs], "published_now": self.published_now,
                "published_after": self.published_after, "rewinds": self.rewinds,
                "conflicts": list(self.conflicts), "notes": list(self.notes),
                "plan_change": self.plan_change}


@dataclass(frozen=True)
class BackfillStarted:
    lineage: str
    backfill_id: int
    origin: LineageOrigin
    #: the runs Airflow created, oldest first
    runs: tuple[BackfillRun, ...]
    preview: BackfillPreview

    def to_json(self) -> dict[str, Any]:
        return {"lineage": self.lineage, "backfill_id": self.backfill_id,
                "first_day": self.preview.first_day, "last_day": self.preview.last_day,
                "runs": [r.to_json() for r in self.runs], "origin": self.origin.to_json(),
                "preview": self.preview.to_json()}


def logical_date_for(data_day: date) -> date:
    """The logical date of the daily run that consumes ``data_day``."""
    return data_day + timedelta(days=1)


def data_day_of(logical: date) -> date:
    """The data day a daily run of logical date ``logical`` consumes."""
    return logical - timedelta(days=1)


def frontier(barrier: Barrier) -> str | None:
    """The last data day an epoch consumed: the day before its input stops (the data
    interval's end); None for an epoch without an interval (an embedded run)."""
    end = (barrier.data_interval or {}).get("end")
    return data_day_of(date.fromisoformat(str(end)[:10])).isoformat() if end else None


def _day(value: str | date, what: str) -> date:
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError:
        raise BackfillRequestError(f"{what} {value!r} is not a date (YYYY-MM-DD)") from None


def _origin(coord: Coordinator, from_epoch: int | None,
            from_savepoint: str | None) -> tuple[dict[str, Any], Barrier]:
    """The origin's description and its barrier (the savepoint's copy for a savepoint)."""
    if (from_epoch is None) == (from_savepoint is None):
        raise BackfillRequestError("give exactly one of from_epoch and from_savepoint")
    try:
        if from_epoch is not None:
            from_epoch = validate_epoch_id(from_epoch)
            meta = coord.metadata(from_epoch)
            if meta is None or not meta.completed:
                raise BackfillRequestError(
                    f"epoch {from_epoch} of {coord.pipeline_id} is "
                    f"{coord.status(from_epoch)}; a backfill starts from a completed epoch")
            barrier = coord.barrier(from_epoch)
            info: dict[str, int | str] = {"from_epoch": from_epoch}
        else:
            name = validate_id(from_savepoint, "savepoint name")
            sp = coord.catalog.savepoint(name)
            barrier, info = sp.barrier, {"from_savepoint": name}
    except CheckpointError as exc:
        raise BackfillRequestError(str(exc)) from None
    return {**info, "epoch_id": barrier.epoch_id, "lineage": barrier.lineage,
            "frontier": frontier(barrier)}, barrier


@dataclass(frozen=True)
class DeployedDag:
    """What the DAG deployed now declares, as Airflow serialized it (the api-server never
    parses DAG files): its epoch plan and the input each data day needs."""

    plan: dict[str, TaskPlan]
    #: keys under ``data`` with a ``{data_day}`` placeholder (CheckpointSettings.daily_inputs)
    daily_inputs: tuple[str, ...] = ()
    data: Storage | None = None
    allow_non_restored_state: bool = False
    #: the DAG's own bounds: no run exists before its start date or after its end date
    start_date: date | None = None
    end_date: date | None = None


def deployed_dag(dag_id: str, with_data: bool = False) -> DeployedDag | None:
    """The latest serialized version of ``dag_id``'s begin step (None for a DAG not
    checkpointed or serialized before this field existed). ``with_data``: open its data
    root, with the DAG's own settings (endpoint, AWS connection), so that the preview can
    check inputs; without it (or without a data root) inputs are not checked."""
    from ..shared.settings import CheckpointSettings
    from .deployed import deployed_begin

    begin = deployed_begin(dag_id)
    if begin is None or begin.plan_json is None:
        return None
    inputs = begin.inputs
    plan = plan_from_json(json.loads(begin.plan_json))
    data = None
    if with_data and inputs.get("data"):
        settings = begin.settings or CheckpointSettings(pipeline_id=dag_id)
        data = CheckpointHook(replace(settings, data=inputs["data"])).get_data_storage()
    return DeployedDag(plan, tuple(inputs.get("daily") or ()), data,
                       bool(inputs.get("allow_non_restored_state")),
                       begin.start_date, begin.end_date)


def plan_change(origin: Barrier, deployed: dict[str, TaskPlan]) -> dict[str, list[str]]:
    """How the deployed plan differs from the origin's (a completed epoch or a savepoint:
    every task of its plan holds state): tasks added (they start empty), removed (their
    state cannot be restored), and tasks whose upstream edges or publishing changed."""
    before = origin.plan
    return {"added": sorted(set(deployed) - set(before)),
            "removed": sorted(set(before) - set(deployed)),
            "changed": sorted(t for t in set(before) & set(deployed)
                              if before[t] != deployed[t])}


def missing_inputs(data: Storage, templates: tuple[str, ...], days: list[date]) -> list[str]:
    """The input keys of ``days`` that are not in ``data``."""
    keys = [k for d in days for k in expected_keys(templates, d)]
    return [k for k in keys if not data.exists(k)]


def _published(coord: Coordinator) -> dict[str, Any] | None:
    m = coord.catalog.manifest()
    if m is None:
        return None
    try:
        front = frontier(coord.barrier(m.epoch_id))
    except CheckpointError:
        front = None
    return {"epoch_id": m.epoch_id, "lineage": m.lineage, "frontier": front,
            "rows": {name: out.rows for name, out in sorted(m.outputs.items())},
            # the table versions the backfill's publishing commit would replace (6.12)
            "tables": table_versions(m.outputs)}


def preview_backfill(coord: Coordinator, first_day: str | date, last_day: str | date, *,
                     from_epoch: int | None = None, from_savepoint: str | None = None,
                     rewind: bool = False,
                     runnable: Callable[[date, date], set[date]] | None = None,
                     deployed: DeployedDag | None = None) -> BackfillPreview:
    """What a backfill of data days ``first_day``..``last_day`` would do. ``runnable``
    answers which logical dates of a range Airflow would run (its own dry run);
    ``deployed`` is the DAG as deployed now (plan changes since the origin, missing
    input)."""
    first, last = _day(first_day, "first_day"), _day(last_day, "last_day")
    if last < first:
        raise BackfillRequestError(f"last_day {last} is before first_day {first}")
    _check_bounds(first, last, deployed)
    origin, origin_barrier = _origin(coord, from_epoch, from_savepoint)
    days = [date.fromordinal(d) for d in range(first.toordinal(), last.toordinal() + 1)]
    runs = tuple(BackfillRun(logical_date_for(d).isoformat(), d.isoformat()) for d in days)
    conflicts: list[str] = []
    notes: list[str] = []
    front = origin["frontier"]
    if front is not None and first.isoformat() <= front:
        conflicts.append(
            f"data day {first} is already in the origin's state (its input runs through "
            f"{front}): start at {date.fromisoformat(front) + timedelta(days=1)} "
            "or from an earlier checkpoint")
    elif front is not None and first > date.fromisoformat(front) + timedelta(days=1):
        gap = (date.fromisoformat(front) + timedelta(days=1)).isoformat()
        notes.append(f"the first run also consumes data days {gap}..{first - timedelta(1)} "
                     "(input after the origin's frontier that its state does not hold)")
    elif front is None:
        notes.append("the origin has no data interval (an embedded run): its frontier is "
                     "unknown")
    published = _published(coord)
    pub_front = published["frontier"] if published else None
    rewinds = pub_front is not None and last.isoformat() < pub_front
    if rewinds and not rewind:
        conflicts.append(
            f"the backfill ends at data day {last}, behind what is published (input through "
            f"{pub_front}): when it completes, the published tables would go back to "
            f"{last}; ask for rewind to do that on purpose")
    if runnable is not None:
        ok = runnable(logical_date_for(first), logical_date_for(last))
        skipped = [r for r in runs if date.fromisoformat(r.logical_date) not in ok]
        if skipped:
            count = f"{len(skipped)} of the {len(runs)} runs: " if len(skipped) > _NAMED else ""
            conflicts.append(
                f"Airflow would not run {count}" + _summarise(
                    [f"{r.logical_date} (data day {r.data_day})" for r in skipped])
                + ": a run of that date is still in flight, or it is not a scheduled date")
    main_open = [o for o in coord.registry().open if o.lineage == "main"]
    if main_open:
        conflicts.append(
            "a main run is in progress (" + ", ".join(
                f"epoch {o.epoch_id} of run {o.run_id}" for o in main_open)
            + "): it would publish while the backfill runs; wait for it to finish, or "
            "abort its epoch")
    change = None
    if deployed is not None:
        change = plan_change(origin_barrier, deployed.plan)
        _plan_findings(change, deployed.allow_non_restored_state, conflicts, notes)
        if deployed.data is not None and deployed.daily_inputs:
            missing = missing_inputs(deployed.data, deployed.daily_inputs, days)
            if missing:
                conflicts.append(f"input missing for {_summarise(missing)}: land it first, "
                                 "or shorten the range")
    promotes = not rewinds
    if promotes:
        notes.append("it reaches what is published: when its last epoch completes, the main "
                     "line continues from it (promotion) and main runs wait for it meanwhile")
    return BackfillPreview(first.isoformat(), last.isoformat(), origin, runs, published,
                           {"frontier": last.isoformat(), "lineage": "(the backfill's)",
                            "promotes": promotes}, rewinds, tuple(conflicts), tuple(notes),
                           change)


def _check_bounds(first: date, last: date, deployed: DeployedDag | None) -> None:
    """Refuse (400) a range longer than MAX_BACKFILL_RUNS or outside the DAG's own start
    and end dates, before anything costly (Airflow's dry run, input checks) runs."""
    runs = last.toordinal() - first.toordinal() + 1
    if runs > MAX_BACKFILL_RUNS:
        raise BackfillRequestError(f"{first}..{last} is {runs} runs; a backfill is at most "
                                   f"{MAX_BACKFILL_RUNS}: split the range")
    if deployed is None:
        return
    if deployed.start_date and logical_date_for(first) < deployed.start_date:
        raise BackfillRequestError(
            f"data day {first} runs at {logical_date_for(first)}, before the DAG's start "
            f"date {deployed.start_date}: the first data day it can replay is "
            f"{data_day_of(deployed.start_date)}")
    if deployed.end_date and logical_date_for(last) > deployed.end_date:
        raise BackfillRequestError(
            f"data day {last} runs at {logical_date_for(last)}, after the DAG's end date "
            f"{deployed.end_date}: the last data day it can replay is "
            f"{data_day_of(deployed.end_date)}")


def _plan_findings(change: dict[str, list[str]], allow_non_restored: bool,
                   conflicts: list[str], notes: list[str]) -> None:
    """A removed task's state cannot be restored: the first epoch's begin would refuse it
    (unless the DAG allows non-restored state), so the preview does now."""
    if change["removed"]:
        text = (f"the DAG no longer has task(s) {', '.join(change['removed'])}, whose state "
                "the origin holds")
        if allow_non_restored:
            notes.append(text + ": their state is dropped (allow_non_restored_state)")
        else:
            conflicts.append(text + ": put them back, or allow non-restored state in "
                             "checkpoint_dag to drop it")
    if change["added"]:
        notes.append(f"task(s) {', '.join(change['added'])} are new since the origin: they "
                     "start from empty state")
    if change["changed"]:
        notes.append(f"task(s) {', '.join(change['changed'])} have other upstream tasks or "
                     "outputs than at the origin")


def start_backfill(coord: Coordinator, api: AirflowApi, dag_id: str, first_day: str | date,
                   last_day: str | date, *, from_epoch: int | None = None,
                   from_savepoint: str | None = None, requested_by: str | None = None,
                   rewind: bool = False) -> BackfillStarted:
    """Preview, refuse (409) on any conflict, then record the lineage's origin and create
    the backfill through Airflow's REST API (``api``, with the caller's token: Airflow
    checks that user's right to backfill the DAG).

    Every day of the range must be runnable: a day Airflow would skip (a run of it still
    in flight) refuses the whole backfill, naming it, because a skipped last day would
    leave the lineage unpublished. A refused backfill writes nothing."""
    preview = airflow_preview(coord, api, dag_id, first_day, last_day, from_epoch=from_epoch,
                              from_savepoint=from_savepoint, rewind=rewind)
    if preview.conflicts:
        raise BackfillRequestError("; ".join(preview.conflicts), 409)
    first = date.fromisoformat(preview.runs[0].logical_date)
    last = date.fromisoformat(preview.runs[-1].logical_date)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    lineage = f"backfill-{stamp}-{secrets.token_hex(3)}"
    origin = new_origin(lineage, first.isoformat(), last.isoformat(), time.time(),
                        from_epoch=from_epoch, from_savepoint=from_savepoint,
                        publish_at=last.isoformat(), requested_by=requested_by,
                        promote=preview.published_after["promotes"])
    coord.records.record_origin(origin)
    try:
        backfill_id = api.create_backfill(dag_id, first, last,
                                          {"checkpoint": {"lineage": origin.lineage}})
    except AirflowApiError as exc:  # Airflow's own refusals: another backfill running, ...
        coord.records.delete_origin(origin.lineage)
        raise BackfillRequestError(f"Airflow refused the backfill: {exc}",
                                   _status(exc)) from None
    # The runs are the dry run's: every day of the range, none skipped (checked above).
    return BackfillStarted(origin.lineage, backfill_id, origin, preview.runs, preview)


def _status(exc: AirflowApiError) -> int:
    """Airflow's refusal as this API answers it: its auth errors and unavailability as
    they are, its own failures (other 5xx) as a bad gateway (the request may be fine; ask
    again or read Airflow's log), any other refusal of the range as a conflict."""
    if exc.status in (401, 403, 503):
        return exc.status
    return 502 if exc.status >= 500 else 409


def airflow_preview(coord: Coordinator, api: AirflowApi, dag_id: str, first_day: str | date,
                    last_day: str | date, **origin: Any) -> BackfillPreview:
    """The preview against Airflow's state: its own dry run of the dates (REST), and the
    DAG as deployed now (plan, daily inputs under its data root)."""

    def runnable(first: date, last: date) -> set[date]:
        try:
            return set(api.backfill_dry_run(dag_id, first, last))
        except AirflowApiError as exc:  # unknown DAG, non-periodic schedule, future dates
            raise BackfillRequestError(f"Airflow refused the backfill: {exc}",
                                       _status(exc)) from None

    return preview_backfill(coord, first_day, last_day, runnable=runnable,
                            deployed=deployed_dag(dag_id, with_data=True), **origin)


