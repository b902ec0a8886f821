"""Promotion (PROTOCOL 1.4): a backfill whose last epoch reaches the main line's input
becomes the main line (the next main epoch restores from it), main waits while such a
backfill runs, the superseded main epochs stay readable, and a backfill that does not
reach main's input is not promoted. On local storage and the S3 server."""

from __future__ import annotations

import pytest

from checkpointing import CheckpointConfig, Coordinator
from checkpointing.errors import PromotingBackfillRunning
from checkpointing.records.backfill_lineages import new_origin, read_promotion, record_origin
from tests.support.helpers import DIAMOND, FakeClock, run_epoch


def day(logical: str) -> dict[str, str]:
    return {"start": logical, "end": logical}


@pytest.fixture
def main3(storage, tmp_path):
    """Main ran logical dates 2013-01-02..04 (epochs 1-3)."""
    clock = FakeClock()
    c = Coordinator(storage, "p", CheckpointConfig(timeout_seconds=600), clock=clock)
    for i, d in enumerate(("2013-01-02", "2013-01-03", "2013-01-04")):
        run_epoch(c, tmp=tmp_path, run_id=f"main-{i}", data_interval=day(d))
    return c, clock


def backfill(c: Coordinator, lineage: str, days: list[str], tmp, promote: bool = True):
    record_origin(c.storage, c.layout, new_origin(
        lineage, days[0], days[-1], c.clock(), from_epoch=1, publish_at=days[-1],
        promote=promote))
    metas = []
    for d in days:
        last = d == days[-1]
        metas.append(run_epoch(c, tmp=tmp, run_id=f"{lineage}-{d}", payload=b"fixed",
                               lineage=lineage, data_interval=day(d),
                               publish_on_complete=last, promote=promote and last))
    return metas


def test_a_backfill_reaching_main_continues_the_main_line(main3, tmp_path):
    c, _ = main3
    metas = backfill(c, "bf-fix", ["2013-01-03", "2013-01-04"], tmp_path)
    last = metas[-1].epoch_id
    rec = read_promotion(c.storage, c.layout, "bf-fix")
    assert (rec.promoted, rec.epoch_id, rec.superseded) == (True, last, 3)
    assert (rec.input_until, rec.main_input_until) == ("2013-01-04", "2013-01-04")
    assert c.latest_completed("main") == last
    # The next scheduled run restores from the backfill's state, not from epoch 3.
    nxt = c.begin_epoch(DIAMOND, "main-3", data_interval=day("2013-01-05"))
    assert nxt.parent_epoch_id == last and nxt.lineage == "main"
    # Superseded main epochs stay there, completed and restorable.
    assert all(c.metadata(e).completed for e in (1, 2, 3))
    assert c.barrier(3).lineage == "main"


def test_main_waits_while_a_promoting_backfill_runs(main3, tmp_path):
    c, clock = main3
    record_origin(c.storage, c.layout, new_origin(
        "bf-slow", "2013-01-03", "2013-01-04", clock(), from_epoch=1,
        publish_at="2013-01-04", promote=True))
    with pytest.raises(PromotingBackfillRunning, match="bf-slow .*main runs wait"):
        c.begin_epoch(DIAMOND, "main-3", data_interval=day("2013-01-05"))
    run_epoch(c, tmp=tmp_path, run_id="bf-1", lineage="bf-slow",
              data_interval=day("2013-01-03"), publish_on_complete=False)
    with pytest.raises(PromotingBackfillRunning):  # between two runs of the backfill
        c.begin_epoch(DIAMOND, "main-3", data_interval=day("2013-01-05"))
    # A backfill that died holds main back for one timeout after its last start only.
    clock.advance(601)
    b = c.begin_epoch(DIAMOND, "main-3", data_interval=day("2013-01-05"))
    assert b.parent_epoch_id == 3


def test_a_backfill_behind_main_is_not_promoted(main3, tmp_path):
    c, _ = main3
    metas = backfill(c, "bf-short", ["2013-01-03"], tmp_path)
    rec = read_promotion(c.storage, c.layout, "bf-short")
    assert rec.promoted is False and rec.superseded == 3
    assert c.latest_completed("main") == 3
    assert c.latest_completed("bf-short") == metas[-1].epoch_id


def test_a_non_promoting_backfill_never_holds_main(main3, tmp_path):
    c, _ = main3
    backfill(c, "bf-side", ["2013-01-03", "2013-01-04"], tmp_path, promote=False)
    assert read_promotion(c.storage, c.layout, "bf-side") is None
    assert c.latest_completed("main") == 3
    assert c.begin_epoch(DIAMOND, "main-3", data_interval=day("2013-01-05")).parent_epoch_id == 3


def test_main_epochs_cannot_be_promoted(main3):
    c, _ = main3
    with pytest.raises(ValueError, match="backfill"):
        c.begin_epoch(DIAMOND, "x", promote=True)
