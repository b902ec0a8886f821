"""The checkpoint run facet of the commit step's lineage, from whatever storage keeps."""

from __future__ import annotations


def test_an_aborted_epoch_retention_deleted_still_gets_its_status_and_reason(tmp_path):
    """Retention deletes an aborted epoch's files at once; the commit step that reports it
    afterwards reads its failure record: the facet says aborted, with the reason, not a
    bare COMPLETE event without a facet."""
    from dag_checkpoints.shared.lineage import FACET_KEY, commit_lineage

    from checkpointing import CheckpointConfig, Coordinator, LocalStorage, run_retention
    from checkpointing.errors import EpochNotFound
    from tests.support.helpers import DIAMOND, run_epoch

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p", CheckpointConfig(retained_epochs=1))
    run_epoch(c, tmp=tmp_path, run_id="r1", payload=b"1")
    bad = c.begin_epoch(DIAMOND, "r2").epoch_id
    c.abort(bad, "declined", "no input")
    run_retention(c)
    try:
        c.barrier(bad)
        raise AssertionError("retention kept the aborted epoch's barrier")
    except EpochNotFound:
        pass
    facet = commit_lineage(c, bad).run_facets[FACET_KEY]
    assert (facet.epoch, facet.status, facet.lineage) == (bad, "aborted", "main")
    assert facet.reason == "declined"
    ok = commit_lineage(c, 1).run_facets[FACET_KEY]  # an epoch with its files, as before
    assert (ok.epoch, ok.status, ok.reason) == (1, "completed", None)
