"""Backfills are asked for in data days: the preview maps each day to the run that consumes
it, states the origin's and the published frontier, refuses a start the origin already
holds and a silent rewind, and names the days Airflow would skip (its dry run, injected
here: the Airflow side runs under tests/system/test_airflow_standalone.py)."""

from __future__ import annotations

from datetime import date

import pytest

from checkpointing import Coordinator, LocalStorage
from checkpointing.records.savepoints import create_savepoint
from plugins.dag_checkpoints.server.backfill import (
    BackfillRequestError,
    data_day_of,
    frontier,
    logical_date_for,
    preview_backfill,
)
from tests.support.helpers import DIAMOND, run_epoch


@pytest.fixture
def coord(tmp_path):
    """Main ran the logical dates 2013-01-02..04 (data days 1-3); savepoint after day 1."""
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    for i, logical in enumerate(("2013-01-02", "2013-01-03", "2013-01-04")):
        run_epoch(c, tmp=tmp_path, run_id=f"r{i}", payload=b"x" * (i + 1),
                  data_interval={"start": logical, "end": logical})
    create_savepoint(c, "after-day1", 1)
    return c


def test_days_map_to_runs_and_frontiers_are_stated(coord):
    p = preview_backfill(coord, "2013-01-02", "2013-01-03", from_savepoint="after-day1")
    assert [(r.logical_date, r.data_day) for r in p.runs] == [
        ("2013-01-03", "2013-01-02"), ("2013-01-04", "2013-01-03")]
    assert p.origin == {"from_savepoint": "after-day1", "epoch_id": 1, "lineage": "main",
                        "frontier": "2013-01-01"}
    assert p.published_now["frontier"] == "2013-01-03"
    assert p.published_now["epoch_id"] == 3 and p.published_now["rows"] == {"gold": 1}
    assert p.published_after["frontier"] == "2013-01-03"
    assert p.published_after["promotes"] is True  # it reaches what is published
    assert (p.rewinds, p.conflicts) == (False, ())
    assert p.notes == ("it reaches what is published: when its last epoch completes, the "
                       "main line continues from it (promotion) and main runs wait for it "
                       "meanwhile",)
    # The mapping is the one the runs' barriers record: an epoch of logical date D + 1
    # has the frontier D.
    for e in (1, 2, 3):
        b = coord.barrier(e)
        assert frontier(b) == data_day_of(date.fromisoformat(b.data_interval["end"])).isoformat()
    assert logical_date_for(date(2013, 1, 2)) == date(2013, 1, 3)


def test_no_silent_rewind(coord):
    p = preview_backfill(coord, "2013-01-02", "2013-01-02", from_savepoint="after-day1")
    assert p.rewinds and len(p.conflicts) == 1
    assert "behind what is published (input through 2013-01-03)" in p.conflicts[0]
    assert "rewind" in p.conflicts[0]
    asked = preview_backfill(coord, "2013-01-02", "2013-01-02", from_savepoint="after-day1",
                             rewind=True)
    assert asked.rewinds and asked.conflicts == ()
    assert asked.published_after["promotes"] is False  # a rewind stays a side chain


def test_days_the_origin_holds_are_refused_and_gaps_noted(coord):
    p = preview_backfill(coord, "2013-01-01", "2013-01-03", from_epoch=1)
    assert p.conflicts and "data day 2013-01-01 is already in the origin's state" in \
        p.conflicts[0] and "start at 2013-01-02" in p.conflicts[0]
    gap = preview_backfill(coord, "2013-01-03", "2013-01-03", from_epoch=1)
    assert gap.conflicts == ()
    assert gap.notes[0] == ("the first run also consumes data days 2013-01-02..2013-01-02 "
                            "(input after the origin's frontier that its state does not hold)")


def test_days_airflow_would_skip_are_named(coord):
    def runnable(first: date, last: date) -> set[date]:
        assert (first, last) == (date(2013, 1, 3), date(2013, 1, 4))
        return {date(2013, 1, 3)}  # a run of 2013-01-04 is in flight

    p = preview_backfill(coord, "2013-01-02", "2013-01-03", from_epoch=1, runnable=runnable)
    assert p.conflicts == ("Airflow would not run 2013-01-04 (data day 2013-01-03): a run of "
                           "that date is still in flight, or it is not a scheduled date",)


def test_many_skipped_days_are_summarised(coord):
    """A long range Airflow would mostly skip is one short conflict: a count and the first
    five runs, not every date (a 27-year range once answered 697 KB)."""
    p = preview_backfill(coord, "2013-01-02", "2013-02-01", from_epoch=1,
                         runnable=lambda first, last: {first})
    (conflict,) = p.conflicts
    assert conflict.startswith("Airflow would not run 30 of the 31 runs: 2013-01-04 (data "
                               "day 2013-01-03), 2013-01-05"), conflict
    assert "and 25 more" in conflict and len(conflict) < 400, conflict


def test_ranges_are_bounded_by_size_and_by_the_dags_dates(coord):
    from dag_checkpoints.server.backfill import MAX_BACKFILL_RUNS, DeployedDag

    with pytest.raises(BackfillRequestError, match=f"at most {MAX_BACKFILL_RUNS}"):
        preview_backfill(coord, "2013-01-03", "2040-01-04", from_epoch=1)
    dag = DeployedDag({}, start_date=date(2013, 1, 1), end_date=date(2013, 12, 31))
    with pytest.raises(BackfillRequestError, match="after the DAG's end date 2013-12-31"):
        preview_backfill(coord, "2013-12-20", "2014-01-04", from_epoch=1, deployed=dag)
    with pytest.raises(BackfillRequestError, match="before the DAG's start date 2013-01-01"):
        preview_backfill(coord, "2012-12-20", "2013-01-04", from_epoch=1, deployed=dag)


def test_bad_requests_are_one_line(coord):
    with pytest.raises(BackfillRequestError, match="last_day 2013-01-01 is before first_day"):
        preview_backfill(coord, "2013-01-02", "2013-01-01", from_epoch=1)
    with pytest.raises(BackfillRequestError, match="exactly one of"):
        preview_backfill(coord, "2013-01-02", "2013-01-03")
    with pytest.raises(BackfillRequestError, match="not a date"):
        preview_backfill(coord, "Jan 2", "2013-01-03", from_epoch=1)
    with pytest.raises(BackfillRequestError, match="epoch 9 of p is"):
        preview_backfill(coord, "2013-01-02", "2013-01-03", from_epoch=9)


def test_plan_changes_since_the_origin_are_reported(coord):
    """The deployed DAG (as Airflow serialized it) against the origin's plan: a new task is
    a note (it starts empty), a removed task with state a conflict unless the DAG allows
    non-restored state, as the first epoch's begin would decide."""
    from dataclasses import replace

    from checkpointing import TaskPlan
    from plugins.dag_checkpoints.server.backfill import DeployedDag

    plan = dict(DIAMOND)
    same = preview_backfill(coord, "2013-01-02", "2013-01-03", from_savepoint="after-day1",
                            deployed=DeployedDag(plan))
    assert same.plan_change == {"added": [], "removed": [], "changed": []}
    assert same.conflicts == ()
    removed = sorted(plan)[0]
    changed = {k: v for k, v in plan.items() if k != removed}
    changed["new_task"] = TaskPlan(())
    for t, tp in changed.items():  # edges to the removed task go with it
        changed[t] = replace(tp, upstream=tuple(u for u in tp.upstream if u != removed))
    p = preview_backfill(coord, "2013-01-02", "2013-01-03", from_savepoint="after-day1",
                         deployed=DeployedDag(changed))
    assert p.plan_change["added"] == ["new_task"] and p.plan_change["removed"] == [removed]
    assert len(p.conflicts) == 1 and f"no longer has task(s) {removed}" in p.conflicts[0]
    assert any("new_task are new since the origin" in n for n in p.notes)
    allowed = preview_backfill(coord, "2013-01-02", "2013-01-03", from_epoch=1,
                               deployed=DeployedDag(changed, allow_non_restored_state=True))
    assert allowed.conflicts == () and any("dropped" in n for n in allowed.notes)
    assert p.to_json()["plan_change"] == p.plan_change


def test_missing_input_days_and_a_main_run_in_progress_are_conflicts(coord, tmp_path):
    from plugins.dag_checkpoints.server.backfill import DeployedDag

    data = LocalStorage(tmp_path / "data")
    data.write("raw/2013-01-02.csv", b"a\n")
    deployed = DeployedDag(dict(DIAMOND), ("raw/{data_day}.csv",), data)
    p = preview_backfill(coord, "2013-01-02", "2013-01-03", from_savepoint="after-day1",
                         deployed=deployed)
    assert p.conflicts == ("input missing for raw/2013-01-03.csv: land it first, or "
                           "shorten the range",)
    data.write("raw/2013-01-03.csv", b"a\n")
    assert preview_backfill(coord, "2013-01-02", "2013-01-03", from_savepoint="after-day1",
                            deployed=deployed).conflicts == ()
    # A main run holding an open epoch would publish while the backfill runs.
    open_epoch = coord.begin_epoch(DIAMOND, "scheduled__2013-01-05").epoch_id
    p = preview_backfill(coord, "2013-01-02", "2013-01-03", from_savepoint="after-day1")
    assert len(p.conflicts) == 1
    assert f"main run is in progress (epoch {open_epoch} of run scheduled__2013-01-05)" \
        in p.conflicts[0]
