"""Property-based (stateful) tests of the coordinator invariants, on local storage:

- epoch ids strictly increase and are never reused;
- at most one decision per epoch, and it never changes;
- completion only with an effective acknowledgement of every planned task;
- the latest pointer never names an epoch that is not completed;
- retention never deletes a file a kept epoch, a savepoint or the manifest references.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from checkpointing import (
    CheckpointConfig,
    Coordinator,
    LocalStorage,
    SnapshotWriter,
    create_savepoint,
    read_manifest,
    run_retention,
)
from checkpointing.errors import (
    EpochAlreadyDecided,
    PolicyViolation,
    StaleAttempt,
)
from checkpointing.protocol.attempts import scan_task
from checkpointing.protocol.barrier import TaskPlan
from tests.support.helpers import FakeClock

PLAN = {"a": TaskPlan(), "b": TaskPlan(("a",), True)}


class CoordinatorMachine(RuleBasedStateMachine):
    @initialize(retained=st.integers(1, 3), concurrent=st.integers(1, 3))
    def setup(self, retained, concurrent):
        self.dir = Path(tempfile.mkdtemp(prefix="ckpt-prop-"))
        self.clock = FakeClock(1_900_000_000.0)  # later than any real mtime: GC may run
        self.storage = LocalStorage(self.dir / "store")
        self.cfg = CheckpointConfig(retained_epochs=retained, max_concurrent_epochs=concurrent,
                                    timeout_seconds=100)
        self.began: list[int] = []
        self.decided: dict[int, tuple[str, str]] = {}
        self.attempts: dict[tuple[int, str], int] = {}
        self.savepoints = 0
        self.n = 0

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def coord(self) -> Coordinator:
        # A fresh coordinator per step, like separate Airflow processes.
        return Coordinator(self.storage, "p", self.cfg, clock=self.clock)

    def pending(self) -> list[int]:
        return [e for e in self.began if e not in self.decided]

    @rule()
    def begin(self):
        try:
            b = self.coord().begin_epoch(PLAN, f"r{len(self.began)}")
        except PolicyViolation:
            return
        assert not self.began or b.epoch_id > max(self.began)
        self.began.append(b.epoch_id)

    @precondition(lambda self: self.pending())
    @rule(data=st.data(), task=st.sampled_from(sorted(PLAN)), retry=st.booleans())
    def ack(self, data, task, retry):
        e = data.draw(st.sampled_from(self.pending()))
        c = self.coord()
        attempt = self.attempts.get((e, task), 0) + (1 if retry or (e, task) not in
                                                     self.attempts else 0)
        self.attempts[(e, task)] = attempt
        try:
            if c.register_attempt(e, task, attempt).existing is not None:
                return
            prev = c.restore_handle(e, task)
            w = SnapshotWriter(self.storage, c.layout, e, task, attempt, previous=prev)
            self.n += 1
            f = self.dir / f"f{self.n}"
            f.write_bytes(f"{task}-{e % 3}".encode())  # repeats content across epochs
            w.add_file("state", f)
            if PLAN[task].publishes:
                w.stage_output("gold", [f], rows=1)
            c.acknowledge(e, task, attempt, w.handle())
        except (EpochAlreadyDecided, StaleAttempt):
            # Refused cleanly: the epoch was decided meanwhile, or a newer attempt exists.
            assert c.decision(e) is not None or \
                scan_task(self.storage, c.layout, e, task).highest > attempt

    @precondition(lambda self: self.pending())
    @rule(data=st.data())
    def complete(self, data):
        e = data.draw(st.sampled_from(self.pending()))
        c = self.coord()
        before = {t: scan_task(self.storage, c.layout, e, t).effective_ack for t in PLAN}
        meta = c.try_complete(e)
        if meta is None:
            assert any(v is None for v in before.values())
            return
        if meta.completed:
            for t in PLAN:
                assert t in meta.acks
                assert meta.acks[t].attempt == scan_task(self.storage, c.layout, e,
                                                         t).highest
        self._record(meta)

    @precondition(lambda self: self.pending())
    @rule(data=st.data())
    def abort(self, data):
        self._record(self.coord().abort(data.draw(st.sampled_from(self.pending())), "cancelled"))

    @rule(seconds=st.sampled_from([10, 150]))
    def time_passes(self, seconds):
        self.clock.advance(seconds)
        for meta in self.coord().expire_overdue():
            self._record(meta)

    @precondition(lambda self: any(s == "completed" for s, _ in self.decided.values()))
    @rule()
    def savepoint(self):
        self.savepoints += 1
        create_savepoint(self.coord(), f"sp{self.savepoints}")

    @rule()
    def retention(self):
        run_retention(self.coord())

    def _record(self, meta):
        key = (meta.status, meta.writer["nonce"])
        assert self.decided.setdefault(meta.epoch_id, key) == key, "a decision changed"

    @invariant()
    def decisions_never_change(self):
        if not hasattr(self, "storage"):
            return
        c = self.coord()
        for e, (status, nonce) in self.decided.items():
            # Also after retention deleted the epoch (1.7): the decision is still read, from
            # the failure record or the registry; its writer only while _metadata exists.
            d = c.decision(e)
            assert d is not None and d.status in (status, "decided"), (e, status, d)
            m = c.metadata(e)
            if m is not None:
                assert (m.status, m.writer["nonce"]) == (status, nonce)

    @invariant()
    def latest_pointer_names_a_completed_epoch(self):
        if not hasattr(self, "storage"):
            return
        c = self.coord()
        reg = c.registry()
        latest = reg.lineage("main").latest_completed
        if latest is not None:
            assert self.decided[latest][0] == "completed"
        found = c.latest_completed()
        completed = [e for e, (s, _) in self.decided.items() if s == "completed"]
        assert found == (max(completed) if completed else None)
        assert reg.last_epoch_id == (max(self.began) if self.began else 0)

    @invariant()
    def referenced_files_exist(self):
        if not hasattr(self, "storage"):
            return
        c = self.coord()
        refs = []
        m = read_manifest(self.storage, c.layout)
        if m:
            refs += m.files()
        from checkpointing import list_savepoints
        for sp in list_savepoints(self.storage, c.layout):
            for h in sp.handles().values():
                refs += h.all_files()
        latest = c.latest_completed()
        if latest:
            for h in c.completed_handles(latest).values():
                refs += h.all_files()
        for ref in refs:
            assert self.storage.exists(self.storage.key_for_uri(ref.uri)), ref.uri


CoordinatorMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestCoordinatorInvariants = CoordinatorMachine.TestCase
