"""The REST API's answers."""

from __future__ import annotations


def test_an_epochs_answer_names_its_table_inputs_without_their_location(tmp_path):
    """The REST API's epoch detail carries the barrier; a table input in it is named by its
    format and table, never by the path it lives at (no storage path in any answer)."""
    import json

    import pandas as pd
    from deltalake import write_deltalake

    from checkpointing import Coordinator, LocalStorage, TableInput
    from checkpointing.protocol.barrier import plan_from_edges
    from plugins.dag_checkpoints.server.api import _public_barrier

    location = f"file://{tmp_path}/lake/gold_flights_enriched"
    write_deltalake(f"{tmp_path}/lake/gold_flights_enriched", pd.DataFrame({"x": [1]}))
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    b = c.begin_epoch(plan_from_edges({"t": []}, table_inputs={"t": {
        "flights": TableInput(location)}}), "r1")
    answer = _public_barrier(b)
    assert answer["plan"]["t"]["table_inputs"] == {
        "flights": {"format": "delta", "table": "gold_flights_enriched"}}
    assert answer["table_versions"] == {"flights": {"version": 0}}
    assert str(tmp_path) not in json.dumps(answer)
    assert str(tmp_path) in json.dumps(b.to_json())  # the document itself keeps it
