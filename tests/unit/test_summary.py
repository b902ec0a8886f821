"""The epoch summary (PROTOCOL 5.7): written once by the first listing after the decision
(never by the decider), equal to the statistics computed from the epoch's documents, read
instead of them by later listings, ignored when malformed, deleted with its epoch."""

from __future__ import annotations

from checkpointing import Coordinator
from checkpointing.coordination.retention import run_retention
from checkpointing.views.listing import list_epochs
from checkpointing.views.stats import epoch_stats
from checkpointing.views.summary import SummaryCache, read_summary
from tests.support.helpers import DIAMOND, run_epoch


def test_first_listing_writes_the_summary_and_later_ones_read_it(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path, run_id="r1")
    run_epoch(c, tmp=tmp_path, run_id="r2")
    aborted = c.begin_epoch(DIAMOND, "r3").epoch_id
    c.abort(aborted, "cancelled", "by hand")
    pending = c.begin_epoch(DIAMOND, "r4").epoch_id
    assert all(read_summary(storage, c.layout, e) is None for e in (1, 2, aborted))
    list_epochs(c, per_task=False, cache=SummaryCache())  # the CLI's: no per-task figures
    assert all(read_summary(storage, c.layout, e) is None for e in (1, 2, aborted))
    list_epochs(c, per_task=True, cache=SummaryCache())
    for e in (1, 2, aborted):
        assert read_summary(storage, c.layout, e) == epoch_stats(c, e, True)
    # ... and says what the setup did, independently of the function that wrote it.
    for e, run_id in ((1, "r1"), (2, "r2")):
        st = read_summary(storage, c.layout, e)
        assert (st.status, st.run_id, st.reason) == ("completed", run_id, None)
        assert st.tasks_acked == st.tasks_total == len(DIAMOND)
        assert sorted(t.task_id for t in st.tasks) == sorted(DIAMOND)
        assert st.state_bytes > 0 and st.duration_ms is not None
    st = read_summary(storage, c.layout, aborted)
    assert (st.status, st.run_id, st.reason, st.detail) == ("aborted", "r3", "cancelled",
                                                             "by hand")
    assert (st.tasks_acked, st.tasks_total) == (0, len(DIAMOND))
    assert read_summary(storage, c.layout, pending) is None
    cache = SummaryCache()
    storage.stats.reset()
    rows = list_epochs(c, per_task=True, cache=cache).rows
    first = storage.stats.total
    assert [r.epoch_id for r in rows] == [pending, aborted, 2, 1]
    assert [r.status for r in rows] == ["pending", "aborted", "completed", "completed"]
    storage.stats.reset()
    assert list_epochs(c, per_task=True, cache=cache).rows == rows
    # A refresh reads listings, the registry and the pending epoch, not decided epochs.
    assert storage.stats.total < first
    # A fresh process reads one summary per decided epoch: fewer requests than computing
    # each from its barrier, _metadata, listing and acknowledgements (1.4's way).
    storage.stats.reset()
    list_epochs(c, per_task=True, cache=SummaryCache())
    with_summaries = storage.stats.total
    for e in (1, 2, aborted):
        storage.delete(c.layout.epoch_summary(e))
    storage.stats.reset()
    assert list_epochs(c, per_task=True, cache=SummaryCache()).rows == rows
    assert with_summaries < storage.stats.total


def test_malformed_or_missing_summary_falls_back_and_is_rewritten(storage, tmp_path):
    c = Coordinator(storage, "p")
    run_epoch(c, tmp=tmp_path)
    key = c.layout.epoch_summary(1)
    want = epoch_stats(c, 1, True)
    storage.write(key, b"{not json")
    assert read_summary(storage, c.layout, 1) is None
    assert list_epochs(c, per_task=True, cache=SummaryCache()).rows == [want]
    storage.delete(key)  # as a 1.4 decider left it
    assert list_epochs(c, per_task=True, cache=SummaryCache()).rows == [want]
    assert read_summary(storage, c.layout, 1) == want  # the reader wrote it


def test_retention_deletes_the_summary_with_its_epoch(storage, tmp_path):
    c = Coordinator(storage, "p")
    for i in range(4):
        run_epoch(c, tmp=tmp_path, run_id=f"r{i}", payload=bytes([i + 1]))
    list_epochs(c, per_task=True, cache=SummaryCache())
    report = run_retention(c)
    assert report.deleted_epochs
    for e in report.deleted_epochs:
        assert not storage.exists(c.layout.epoch_summary(e))
    for e in report.kept_epochs:
        assert read_summary(storage, c.layout, e) is not None
