"""Backfill from a checkpoint (Flink's ``-s <savepoint>`` restore, for a date range).

A backfill starts at a completed epoch or a savepoint and replays a logical-date range
through Airflow's own backfill machinery (one run at a time, oldest first). Its epochs form
a new lineage, whose origin record is written first; the begin step of each run reads the
lineage from the run's conf, restores along the chain and publishes only at the last date.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from checkpointing import Coordinator, read_savepoint
from checkpointing.errors import CheckpointError
from checkpointing.ids import validate_epoch_id, validate_id
from checkpointing.lineages import LineageOrigin, delete_origin, new_origin, record_origin


class BackfillRequestError(ValueError):
    """The request cannot start a backfill: ``status`` 400 for a bad request (range, unknown
    epoch), 409 when Airflow's state refuses it (a date in flight, another backfill)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class BackfillStarted:
    lineage: str
    backfill_id: int
    origin: LineageOrigin
    #: logical dates (YYYY-MM-DD) of the runs Airflow created, oldest first
    run_dates: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"lineage": self.lineage, "backfill_id": self.backfill_id,
                "runs": len(self.run_dates), "run_dates": list(self.run_dates),
                "origin": self.origin.to_json()}


def _day(value: str | date, what: str) -> date:
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError:
        raise BackfillRequestError(f"{what} {value!r} is not a date (YYYY-MM-DD)") from None


def plan_backfill(coord: Coordinator, start: str | date, end: str | date, *,
                  from_epoch: int | None = None, from_savepoint: str | None = None,
                  requested_by: str | None = None) -> LineageOrigin:
    """Check the request against checkpoint storage and describe the lineage to create."""
    first, last = _day(start, "start"), _day(end, "end")
    if last < first:
        raise BackfillRequestError(f"end {last} is before start {first}")
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
        else:
            validate_id(from_savepoint, "savepoint name")
            read_savepoint(coord.storage, coord.layout, from_savepoint)
    except CheckpointError as exc:
        raise BackfillRequestError(str(exc)) from None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    lineage = f"backfill-{stamp}-{secrets.token_hex(3)}"
    return new_origin(lineage, first.isoformat(), last.isoformat(), time.time(),
                      from_epoch=from_epoch, from_savepoint=from_savepoint,
                      publish_at=last.isoformat(), requested_by=requested_by)


def start_backfill(coord: Coordinator, dag_id: str, start: str | date, end: str | date, *,
                   from_epoch: int | None = None, from_savepoint: str | None = None,
                   requested_by: str | None = None) -> BackfillStarted:
    """Check the request, then record the lineage's origin and create the backfill with
    Airflow's machinery (needs the metadata database: call from the api-server or a CLI on
    the scheduler's host, as ``airflow backfill create`` does).

    Every date of the range must be runnable: a date Airflow would skip (a run of it still
    in flight) refuses the whole backfill, naming the dates, because a skipped last date
    would leave the lineage unpublished. A refused backfill writes nothing."""
    from airflow.models.backfill import ReprocessBehavior, _create_backfill

    origin = plan_backfill(coord, start, end, from_epoch=from_epoch,
                           from_savepoint=from_savepoint, requested_by=requested_by)
    first, last = _day(origin.start, "start"), _day(origin.end, "end")
    kwargs = {
        "dag_id": dag_id,
        "from_date": datetime(first.year, first.month, first.day, tzinfo=UTC),
        "to_date": datetime(last.year, last.month, last.day, tzinfo=UTC),
        "reverse": False,  # oldest first: each epoch restores from the one before
        # Dates that already ran are run again, on the new lineage.
        "reprocess_behavior": ReprocessBehavior.COMPLETED,
        "dag_run_conf": {"checkpoint": {"lineage": origin.lineage}},  # see runconf.py
    }
    _check_every_date_runs(first, last, kwargs)
    record_origin(coord.storage, coord.layout, origin)
    try:
        backfill = _create_backfill(max_active_runs=1, triggering_user_name=requested_by,
                                    **kwargs)
    except Exception as exc:  # Airflow's own refusals: another backfill running, no runs
        delete_origin(coord.storage, coord.layout, origin.lineage)
        raise BackfillRequestError(f"Airflow refused the backfill: {exc}", 409) from None
    return BackfillStarted(origin.lineage, backfill.id, origin, _run_dates(backfill.id))


def _check_every_date_runs(first: date, last: date, kwargs: dict[str, Any]) -> None:
    """Airflow's dry run of the backfill: refuse (409) unless it would run every date."""
    from airflow.models.backfill import _do_dry_run
    from airflow.utils.session import create_session

    try:
        with create_session() as session:
            runnable = {info.logical_date.date()
                        for info in _do_dry_run(session=session, **kwargs)}
    except Exception as exc:  # unknown DAG, non-periodic schedule, future dates, ...
        raise BackfillRequestError(f"Airflow refused the backfill: {exc}", 409) from None
    days = [date.fromordinal(d) for d in range(first.toordinal(), last.toordinal() + 1)]
    skipped = [d.isoformat() for d in days if d not in runnable]
    if skipped:
        raise BackfillRequestError(
            f"cannot backfill {first}..{last}: Airflow would not run {', '.join(skipped)} "
            "(a run of that date is still in flight, or it is not a scheduled date); wait "
            "for it to finish or choose another range", 409)


def _run_dates(backfill_id: int) -> tuple[str, ...]:
    """Logical dates of the runs Airflow created or re-queued for the backfill."""
    from airflow.models.backfill import BackfillDagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(BackfillDagRun.logical_date).where(
            BackfillDagRun.backfill_id == backfill_id,
            BackfillDagRun.dag_run_id.is_not(None)).order_by(BackfillDagRun.logical_date))
        return tuple(d.date().isoformat() for d in rows)
