"""The landed files an epoch reads (PROTOCOL 5.21, 6.16): the first attempt of an epoch to
list a prefix records its keys, and every task and attempt of the epoch reads from them.

The property is checked over histories that Hypothesis draws: files land and are rewritten
between any two attempts, attempts are killed after reading (no acknowledgement) and run
again, and two tasks read the same prefix in each epoch. The independent computation is
the model's record of which files existed when the epoch first listed the prefix: after
every completed epoch, each task has consumed exactly those files, each once, and after a
last epoch with nothing landed, each task's consumed content equals the files' content.
The run goes through the job runtime's own reading side (``JobRun.new_input``) and the
coordinator, on the tier's storage backend; no Spark is involved in finding files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointing import Coordinator, plan_from_edges
from checkpointing.errors import MalformedDocument
from checkpointing.protocol.listings import listing_source
from checkpointing.storage import Storage
from spark_jobs.runtime.job_run import JobRun
from spark_jobs.runtime.run_context import NoOperationLog

TASKS = ("orders", "totals")
PLAN = plan_from_edges(dict.fromkeys(TASKS, []))
_examples = itertools.count()


class History:
    """One pipeline whose two tasks consume the files landed under one prefix of the data
    root (the same storage as the checkpoints, under a prefix of its own)."""

    def __init__(self, storage: Storage, tmp: Path):
        n = next(_examples)
        self.storage, self.tmp = storage, tmp / f"h{n}"
        self.tmp.mkdir(parents=True)
        self.prefix = f"landing{n}/orders/"
        self.c = Coordinator(storage, f"listings{n}")
        self.days = itertools.count(1)
        self.versions: dict[str, int] = {}
        self.epoch = self.c.begin_epoch(PLAN, "r1").epoch_id
        self.attempts = dict.fromkeys(TASKS, 0)
        self.acked: set[str] = set()
        #: the keys present when the epoch's first attempt listed the prefix (the model)
        self.pinned: set[str] | None = None
        self.consumed: dict[str, dict[str, str]] = {t: {} for t in TASKS}

    def land(self) -> None:
        key = f"{self.prefix}2013-01-{next(self.days):02d}.csv"
        self.versions[key] = 1
        self.storage.write(key, f"id\n{key}:1\n".encode())

    def rewrite(self, i: int) -> None:
        if self.versions:
            key = sorted(self.versions)[i % len(self.versions)]
            self.versions[key] += 1
            self.storage.write(key, f"id\n{key}:{self.versions[key]}\n".encode())

    def attempt(self, task: str, acknowledge: bool) -> None:
        if task in self.acked:
            return
        if self.pinned is None:
            self.pinned = set(self.versions)
        self.attempts[task] += 1
        a = self.attempts[task]
        self.c.register_attempt(self.epoch, task, a)
        previous = self.c.restore_handle(self.epoch, task)
        storage = self.c.task_storage(self.epoch, task, a)
        writer = storage.writer(previous)
        scratch = self.tmp / f"{task}-{self.epoch}-{a}"
        scratch.mkdir()
        run = JobRun(self.c.barrier(self.epoch), self.epoch, task, a, None, self.storage,
                     previous, {}, writer, scratch, storage, NoOperationLog(),
                     listings=self.c)
        found = run.new_input(self.prefix)
        # The epoch reads only files its first listing found, whatever landed since.
        assert set(found.new) <= self.pinned, (task, a, sorted(set(found.new) - self.pinned))
        ref = next((f for f in previous.files if f.name == "consumed.json"), None) \
            if previous else None
        consumed = json.loads(storage.read(ref)) if ref else {}
        for key in found.new:
            consumed[key] = self.storage.read(key)[0].decode().splitlines()[1]
        (scratch / "consumed.json").write_text(json.dumps(consumed))
        writer.add_file("consumed.json", scratch / "consumed.json")
        handle = writer.handle(offsets=found.offsets)
        if acknowledge:  # else killed after reading: the next attempt runs it again
            self.c.acknowledge(self.epoch, task, a, handle)
            self.acked.add(task)
            self.consumed[task] = consumed

    def end_epoch(self) -> None:
        for task in TASKS:
            self.attempt(task, acknowledge=True)
        assert self.c.complete(self.epoch).completed
        for task in TASKS:  # each file of the epoch's listing consumed, once; no other
            assert set(self.consumed[task]) == self.pinned, (task, self.epoch)
        self.epoch = self.c.begin_epoch(PLAN, f"r{self.epoch + 1}").epoch_id
        self.attempts = dict.fromkeys(TASKS, 0)
        self.acked, self.pinned = set(), None


STEPS = st.lists(st.one_of(
    st.just(("land",)),
    st.tuples(st.just("rewrite"), st.integers(0, 20)),
    st.tuples(st.just("attempt"), st.sampled_from(TASKS), st.booleans()),
    st.just(("end",))), min_size=1, max_size=24)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=STEPS)
def test_every_task_and_attempt_of_an_epoch_reads_the_files_of_its_first_listing(
        storage, tmp_path, steps):
    h = History(storage, tmp_path)
    for kind, *args in steps:
        {"land": h.land, "rewrite": h.rewrite, "attempt": h.attempt,
         "end": h.end_epoch}[kind](*args)
    h.end_epoch()
    h.end_epoch()  # nothing landed: every file's latest content has been consumed
    latest = {k: f"{k}:{v}" for k, v in h.versions.items()}
    assert h.consumed == {t: latest for t in TASKS}


def test_a_file_of_the_listing_deleted_before_a_later_attempt_reads_is_not_read(
        storage, tmp_path):
    h = History(storage, tmp_path)
    h.land()
    h.land()
    h.attempt("orders", acknowledge=True)
    gone = sorted(h.versions)[1]
    storage.delete(gone)
    del h.versions[gone]
    h.pinned = set(h.versions)
    h.attempt("totals", acknowledge=True)  # neither fails nor reads the deleted file
    assert set(h.consumed["totals"]) == set(h.versions)
    assert gone in h.consumed["orders"]  # read before it was deleted; nothing retracted


def test_a_malformed_listing_fails_the_attempt_in_one_line_naming_it(storage, tmp_path):
    h = History(storage, tmp_path)
    h.land()
    key = h.c.layout.listing(h.epoch, listing_source(storage.uri(""), h.prefix))
    storage.create(key, b'{"format": "ckpt.listing", "protocol_version": "1.28"}')
    with pytest.raises(MalformedDocument) as e:
        h.attempt("orders", acknowledge=True)
    assert "\n" not in str(e.value) and key in str(e.value), e.value


def test_a_run_without_an_epoch_reads_what_it_lists(storage, tmp_path):
    """Checkpointing disabled: no other attempt shares its reads, nothing is recorded."""
    h = History(storage, tmp_path)
    h.land()
    scratch = tmp_path / "unchecked"
    scratch.mkdir()
    t = h.c.task_storage(h.epoch, "orders", 1)
    run = JobRun(h.c.barrier(h.epoch), h.epoch, "orders", 1, None, storage, None, {},
                 t.writer(None), scratch, t, NoOperationLog())
    assert run.new_input(h.prefix).new == sorted(h.versions)
    assert not list(storage.list(f"{h.c.layout.epoch_prefix(h.epoch)}listings/"))


def test_no_listing_is_created_in_a_decided_epoch(storage, tmp_path):
    """An attempt still running after its epoch was decided (aborted by an operator, timed
    out) must not bring the epoch's directory back once retention deleted it (6.11)."""
    from checkpointing.errors import EpochAlreadyDecided
    from checkpointing.protocol.listings import FileListing

    h = History(storage, tmp_path)
    h.land()
    h.c.abort(h.epoch, "timeout", "timed out")
    with pytest.raises(EpochAlreadyDecided):
        h.c.pin_listing(h.epoch, listing_source(storage.uri(""), h.prefix),
                        FileListing(h.prefix, tuple(h.versions), "orders", 1,
                                    "2013-01-03T00:00:00.000Z"))
    assert not list(storage.list(f"{h.c.layout.epoch_prefix(h.epoch)}listings/"))
