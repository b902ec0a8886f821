"""The coordinator's listener (checkpointing/protocol/listener.py), what Airflow metrics are emitted
from: each event reported once, by the process whose write it is; a listener that fails
never fails the protocol and is logged once."""

from __future__ import annotations

import logging

import pytest

from bench.harness.race import race
from checkpointing import Coordinator, LocalStorage, StateHandle
from checkpointing.errors import EpochAlreadyDecided, StaleAttempt
from checkpointing.protocol.listener import EpochListener
from tests.support.helpers import DIAMOND, ack_task


class Recorder(EpochListener):
    def __init__(self):
        self.events: list[tuple] = []

    def epoch_began(self, barrier):
        self.events.append(("began", barrier.epoch_id))

    def task_acknowledged(self, barrier, ack):
        self.events.append(("acked", barrier.epoch_id, ack.task_id, ack.attempt))

    def ack_refused(self, epoch_id, task_id, why):
        self.events.append(("refused", epoch_id, task_id))

    def epoch_decided(self, meta, barrier, handles, last_completed_at):
        self.events.append(("decided", meta.epoch_id, meta.status, meta.reason,
                            tuple(sorted(handles)), last_completed_at))


def test_each_event_is_reported_once(tmp_path):
    rec = Recorder()
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p", listener=rec)
    b = c.begin_epoch(DIAMOND, "r1")
    for task in DIAMOND:
        ack_task(c, b.epoch_id, task, files={"s": task.encode()}, tmp=tmp_path)
    ack_task(c, b.epoch_id, "src_a", tmp=tmp_path)  # a duplicate: not reported
    results, errors = race(lambda _: c.complete(b.epoch_id).status, 6)
    assert not errors and set(results) == {"completed"}
    first = c.metadata(b.epoch_id)
    with pytest.raises(EpochAlreadyDecided):  # a late attempt, refused
        c.acknowledge(b.epoch_id, "src_a", 2, StateHandle("src_a", b.epoch_id, 2))
    b2 = c.begin_epoch(DIAMOND, "r2")
    ack_task(c, b2.epoch_id, "src_a", attempt=2, tmp=tmp_path)
    with pytest.raises(StaleAttempt):
        c.acknowledge(b2.epoch_id, "src_a", 1, StateHandle("src_a", b2.epoch_id, 1))
    c.abort(b2.epoch_id, "cancelled", "by hand")
    c.abort(b2.epoch_id, "timeout", "again")  # decided already: not reported
    assert rec.events == [
        ("began", 1), *[("acked", 1, t, 1) for t in DIAMOND],
        ("decided", 1, "completed", None, tuple(sorted(DIAMOND)), None),
        ("refused", 1, "src_a"), ("began", 2), ("acked", 2, "src_a", 2),
        ("refused", 2, "src_a"),
        ("decided", 2, "aborted", "cancelled", (), first.decided_at)]


def test_a_failing_listener_never_fails_the_protocol(tmp_path, caplog):
    class Broken(EpochListener):
        def _down(self, *args):
            raise RuntimeError("the metrics backend is down")

        epoch_began = task_acknowledged = epoch_decided = _down  # type: ignore[assignment]

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p", listener=Broken())
    with caplog.at_level(logging.WARNING, logger="checkpointing.protocol.listener"):
        b = c.begin_epoch(DIAMOND, "r1")
        for task in DIAMOND:
            ack_task(c, b.epoch_id, task, tmp=tmp_path)
        assert c.complete(b.epoch_id).completed
    warnings = [r for r in caplog.records if r.name == "checkpointing.protocol.listener"]
    assert len(warnings) == 1 and "the metrics backend is down" in warnings[0].getMessage()

