"""The bounded history of epoch statistics (PROTOCOL 5.19): whatever retention keeps,
the newest ``epoch_history`` completed epochs stay listed with their figures. On local
storage only: the rule is the store's listing, which tests/unit/test_history.py's shorter
tests also check on MinIO, where 120 epochs would cost minutes."""

from __future__ import annotations

import json

from checkpointing import CheckpointConfig, Coordinator, LocalStorage, run_retention
from checkpointing.views.listing import list_epochs
from checkpointing.views.summary import SummaryCache
from tests.support.helpers import DIAMOND, run_epoch
from tests.unit.test_history import ckpt


def test_after_120_epochs_with_one_retained_the_history_keeps_the_last_100(tmp_path):
    """Flink keeps a bounded history of checkpoint statistics whatever it retains: with
    retained_epochs=1 and the default epoch_history (100), 120 completed epochs (every
    tenth one preceded by an aborted one) leave the retained epoch and the 100 completed
    ones before it listed with their figures, and the aborted ones with their reason, in
    the listing the REST API, the page and ``ckpt epochs`` share; older ones are pruned by
    the history's rule."""
    storage = LocalStorage(tmp_path / "ckpt")
    c = Coordinator(storage, "p", CheckpointConfig(retained_epochs=1))
    assert c.config.epoch_history == 100
    completed, aborted = [], []
    for n in range(1, 121):
        if n % 10 == 0:
            b = c.begin_epoch(DIAMOND, f"bad{n}")
            aborted.append(c.abort(b.epoch_id, "declined", "no input").epoch_id)
        meta = run_epoch(c, tmp=tmp_path, run_id=f"r{n}", payload=str(n).encode())
        completed.append(meta.epoch_id)
        run_retention(c)
    listing = list_epochs(c, limit=500, per_task=True, cache=SummaryCache())  # as REST
    rows = {r.epoch_id: r for r in listing.rows}
    kept = [e for e in completed if e in rows]
    assert kept == completed[-101:], (len(kept), kept[:3])
    assert all(rows[e].status == "completed" and rows[e].tasks_acked == len(DIAMOND)
               and rows[e].state_bytes > 0 and rows[e].duration_ms is not None
               for e in kept)
    assert rows[completed[-1]].source == "epoch"
    assert {rows[e].source for e in kept[:-1]} == {"history"}
    # the aborted ones the failure history keeps, with their reason
    assert all(rows[e].status == "aborted" and rows[e].reason == "declined"
               for e in aborted if e in rows)
    # the page's header counts every listed epoch, not one page of them
    page = list_epochs(c, limit=10, per_task=True, cache=SummaryCache(), count=True)
    assert page.counts == {"completed": 101, "aborted": sum(e in rows for e in aborted)}
    assert len(page.rows) == 10 and page.total == len(rows)
    shown = json.loads(ckpt(storage, "show", str(kept[0]), "--json").stdout)
    assert shown["source"] == "history" and shown["status"] == "completed"
    pruned = ckpt(storage, "show", str(completed[-102]))
    assert pruned.returncode == 2
    assert f"epoch {completed[-102]} of pipeline 'p' is beyond the kept history" \
        in pruned.stderr, pruned.stderr
    never = ckpt(storage, "show", "9999")
    assert never.returncode == 2 and "does not exist" in never.stderr, never.stderr
