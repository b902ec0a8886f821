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
from checkpointing.lineages import LineageOrigin, new_origin, record_origin


class BackfillRequestError(ValueError):
    """The request cannot start a backfill (bad range, unknown epoch, ...): a 4xx."""


@dataclass(frozen=True)
class BackfillStarted:
    lineage: str
    backfill_id: int
    origin: LineageOrigin
    runs: int

    def to_json(self) -> dict[str, Any]:
        return {"lineage": self.lineage, "backfill_id": self.backfill_id, "runs": self.runs,
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
    """Record the lineage's origin, then create the backfill with Airflow's machinery
    (needs the metadata database: call from the api-server or a CLI on the scheduler's
    host, as ``airflow backfill create`` does)."""
    from airflow.models.backfill import ReprocessBehavior, _create_backfill

    origin = plan_backfill(coord, start, end, from_epoch=from_epoch,
                           from_savepoint=from_savepoint, requested_by=requested_by)
    record_origin(coord.storage, coord.layout, origin)
    first, last = _day(origin.start, "start"), _day(origin.end, "end")
    try:
        backfill = _create_backfill(
            dag_id=dag_id,
            from_date=datetime(first.year, first.month, first.day, tzinfo=UTC),
            to_date=datetime(last.year, last.month, last.day, tzinfo=UTC),
            # One run at a time, oldest first: each epoch restores from the one before.
            max_active_runs=1,
            reverse=False,
            dag_run_conf={"checkpoint": {"lineage": origin.lineage}},  # see runconf.py
            triggering_user_name=requested_by,
            # Dates that already ran are run again, on the new lineage.
            reprocess_behavior=ReprocessBehavior.COMPLETED,
        )
    except Exception as exc:  # Airflow's own refusals: another backfill running, no runs
        raise BackfillRequestError(f"Airflow refused the backfill: {exc}") from None
    return BackfillStarted(origin.lineage, backfill.id, origin, _runs_created(backfill.id))


def _runs_created(backfill_id: int) -> int:
    """How many runs Airflow created or re-queued for the backfill (dates it skipped, e.g.
    a run in flight, have no dag run)."""
    from airflow.models.backfill import BackfillDagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return int(session.scalar(select(func.count()).where(
            BackfillDagRun.backfill_id == backfill_id,
            BackfillDagRun.dag_run_id.is_not(None))) or 0)
