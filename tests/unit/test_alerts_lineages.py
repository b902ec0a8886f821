"""Alert records (announced once) and backfill lineages (origin, chain, publication)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from checkpointing import CheckpointConfig, Coordinator, read_manifest
from checkpointing.errors import CheckpointError, MalformedDocument
from checkpointing.protocol.documents import parse_iso
from checkpointing.records.alerts import EpochAlert, read_alert, record_alert
from checkpointing.records.backfill_lineages import (
    LineageExists,
    new_origin,
    read_origin,
    record_origin,
)
from tests.support.helpers import DIAMOND, FakeClock, ack_task, run_epoch


def test_timeout_alert_is_recorded_once_and_names_missing_tasks(storage, tmp_path):
    clock = FakeClock()
    c = Coordinator(storage, "flights", CheckpointConfig(timeout_seconds=10), clock=clock)
    b = c.begin_epoch(DIAMOND, "scheduled__2013-01-02")
    ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)
    clock.advance(11)
    [meta] = c.expire_overdue()
    alert = EpochAlert.from_abort("flights", meta, c.barrier(b.epoch_id))
    assert alert.reason == "timeout"
    assert alert.missing_tasks == ("join", "sink", "src_b")
    assert "scheduled__2013-01-02" in alert.message() and "src_b" in alert.message()
    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(lambda _: record_alert(storage, c.layout, alert), range(8)))
    assert wins.count(True) == 1
    stored = read_alert(storage, c.layout, b.epoch_id)
    assert stored is not None and stored.missing_tasks == alert.missing_tasks
    assert read_alert(storage, c.layout, 99) is None


def test_malformed_alert_is_refused_and_kept(storage):
    c = Coordinator(storage, "flights")
    storage.create(c.layout.alert(1), b"{not json")
    with pytest.raises(MalformedDocument, match="alert.json"):
        read_alert(storage, c.layout, 1)
    assert storage.read(c.layout.alert(1))[0] == b"{not json"


def test_backfill_lineage_restores_from_origin_then_chains(storage, tmp_path):
    c = Coordinator(storage, "flights")
    for i in range(3):
        run_epoch(c, tmp=tmp_path, run_id=f"r{i}", payload=str(i).encode())
    assert read_manifest(storage, c.layout).epoch_id == 3
    origin = new_origin("bf-1", "2013-01-02", "2013-01-03", c.clock(), from_epoch=1,
                        publish_at="2013-01-03")
    record_origin(storage, c.layout, origin)
    with pytest.raises(LineageExists):
        record_origin(storage, c.layout, origin)
    assert read_origin(storage, c.layout, "bf-1").from_epoch == 1
    assert read_origin(storage, c.layout, "main") is None

    first = c.begin_epoch(DIAMOND, "backfill__2013-01-02", lineage="bf-1",
                          publish_on_complete=False)
    assert first.parent_epoch_id == 1 and first.lineage == "bf-1"
    for t in DIAMOND:
        ack_task(c, first.epoch_id, t, tmp=tmp_path)
    c.complete(first.epoch_id)
    # Not the last run of the backfill: published outputs stay where they were.
    assert read_manifest(storage, c.layout).epoch_id == 3
    second = c.begin_epoch(DIAMOND, "backfill__2013-01-03", lineage="bf-1")
    assert second.parent_epoch_id == first.epoch_id
    for t, tp in DIAMOND.items():
        ack_task(c, second.epoch_id, t, tmp=tmp_path,
                 outputs={"gold": b"bf"} if tp.publishes else None)
    c.complete(second.epoch_id)
    m = read_manifest(storage, c.layout)
    assert (m.epoch_id, m.lineage) == (second.epoch_id, "bf-1")
    # main is untouched by the backfill's lineage.
    assert c.latest_completed() == 3 and c.latest_completed("bf-1") == second.epoch_id


def test_origin_must_name_exactly_one_start_and_a_completed_epoch(storage, tmp_path):
    c = Coordinator(storage, "flights")
    with pytest.raises(ValueError, match="exactly one"):
        new_origin("bf-x", "2013-01-01", "2013-01-02", 0.0)
    with pytest.raises(ValueError, match="main"):
        new_origin("main", "2013-01-01", "2013-01-02", 0.0, from_epoch=1)
    b = c.begin_epoch(DIAMOND, "r")  # pending, not completed
    record_origin(storage, c.layout, new_origin("bf-y", "2013-01-01", "2013-01-02", 0.0,
                                                from_epoch=b.epoch_id))
    with pytest.raises(CheckpointError, match="not completed"):
        c.begin_epoch(DIAMOND, "backfill__x", lineage="bf-y")


def test_retention_keeps_the_start_of_a_backfill_not_yet_started(storage, tmp_path):
    from checkpointing import run_retention

    c = Coordinator(storage, "flights", CheckpointConfig(retained_epochs=1))
    for i in range(3):
        run_epoch(c, tmp=tmp_path, run_id=f"r{i}", payload=str(i).encode())
    record_origin(storage, c.layout, new_origin("bf-1", "2013-01-02", "2013-01-03",
                                                c.clock(), from_epoch=1))
    report = run_retention(c)
    assert 1 in report.kept_epochs and 2 in report.deleted_epochs
    first = c.begin_epoch(DIAMOND, "backfill__2013-01-02", lineage="bf-1")
    assert first.parent_epoch_id == 1 and c.restore_handle(first.epoch_id, "src_a") is not None


def test_staleness_alerts_once_per_stale_period(storage, tmp_path):
    """PROTOCOL 5.18: a lineage whose last completed epoch is older than
    ``max_epoch_age_seconds`` gets one alert, whoever checks and however often; an abort
    within the same period adds none; a newer completed epoch starts a new period."""
    from checkpointing.coordination.staleness import CODEC

    clock = FakeClock()
    day = 86400.0
    c = Coordinator(storage, "flights", CheckpointConfig(max_epoch_age_seconds=day),
                    clock=clock)
    assert c.records.stale_alert() is None  # nothing completed yet: the timeouts alert instead
    run_epoch(c, DIAMOND, tmp=tmp_path, run_id="r1")
    clock.advance(day - 1)
    assert c.records.stale_alert() is None and c.records.staleness() is None
    clock.advance(2)
    # What the page shows, read only: stale since the epoch's age passed the maximum, the
    # alert not sent yet; reading it records nothing.
    seen = c.records.staleness()
    decided = parse_iso(c.metadata(1).decided_at)
    assert seen is not None and (seen.last_epoch_id, seen.alerted) == (1, False)
    assert parse_iso(seen.since) == pytest.approx(decided + day, abs=0.01)
    assert c.records.staleness() == seen
    other = Coordinator(storage, "flights", CheckpointConfig(max_epoch_age_seconds=day),
                        clock=clock)
    with ThreadPoolExecutor(8) as pool:
        alerts = list(pool.map(lambda i: (c if i % 2 else other).records.stale_alert(), range(8)))
    [alert] = [a for a in alerts if a is not None]
    assert alert.last_epoch_id == 1 and alert.age_seconds == pytest.approx(day + 1)
    assert "no checkpoint epoch of flights completed for" in alert.message()
    assert "the last completed epoch is 1" in alert.message()
    key = c.layout.stale_alert("main", 1)
    assert CODEC.decode(storage.read(key)[0], key).last_epoch_id == 1
    assert c.records.staleness() == replace(seen, alerted=True)
    b = c.begin_epoch(DIAMOND, "r2")
    c.abort(b.epoch_id, "declined", "bad input")
    clock.advance(day)
    assert c.records.stale_alert() is None  # the same stale period
    assert c.records.stale_resolved() == []  # still stale: nothing completed since
    assert c.records.last_completed_age() == pytest.approx(2 * day + 1)
    run_epoch(c, DIAMOND, tmp=tmp_path, run_id="r3")
    assert c.records.stale_alert() is None  # fresh again
    assert c.records.last_completed_age() == 0
    # The period's end is recorded once, whoever checks (the watcher of every scheduler,
    # a begin step): one "resolved" notice.
    with ThreadPoolExecutor(8) as pool:
        ends = [r for rs in pool.map(lambda i: (c if i % 2 else other).records
                                     .stale_resolved(), range(8)) for r in rs]
    [end] = ends
    assert (end.stale_after_epoch_id, end.completed_epoch_id) == (1, 3)
    assert "complete again" in end.message() and "epoch 3 completed" in end.message()
    assert c.records.stale_resolved() == []
    clock.advance(day + 1)
    again = c.records.stale_alert()
    assert again is not None and again.last_epoch_id == 3
    run_epoch(c, DIAMOND, tmp=tmp_path, run_id="r4")
    assert [r.stale_after_epoch_id for r in c.records.stale_resolved()] == [3]
    unconfigured = Coordinator(storage, "flights", clock=clock)
    assert unconfigured.records.stale_alert() is None
    with pytest.raises(ValueError, match="max_epoch_age_seconds"):
        CheckpointConfig(max_epoch_age_seconds=0)
