"""A run with checkpointing disabled keeps its files apart (the core's
state.unchecked_runs, as the operator uses it)."""

from __future__ import annotations


def test_an_unchecked_run_writes_only_its_scratch_and_clears_earlier_ones(tmp_path):
    """Runs with checkpointing disabled keep their files under <pipeline>/unchecked/<run>/;
    the next such run's begin deletes the earlier runs' and nothing else."""
    from checkpointing import Coordinator, LocalStorage
    from checkpointing.state.unchecked_runs import UncheckedLayout, run_key

    st = LocalStorage(tmp_path)
    old, new = UncheckedLayout("p", run=run_key("r1")), UncheckedLayout("p", run=run_key("r2"))
    assert old.state_prefix(1, "t", 1) == f"p/unchecked/{run_key('r1')}/state/t/"
    assert old.staging_prefix(9, "t", 3) == f"p/unchecked/{run_key('r1')}/staging/t/"
    for key in (old.state_prefix(1, "t", 1) + "a.parquet", new.state_prefix(1, "t", 1) + "b",
                "p/counter.json", "p/epochs/0000000001/barrier.json", "q/unchecked/x/y"):
        st.write(key, b"x")
    assert Coordinator(st, "p").unchecked_run("r2").clear_earlier_runs() == 1
    left = sorted(o.key for o in st.list(""))
    assert left == sorted([new.state_prefix(1, "t", 1) + "b", "p/counter.json",
                           "p/epochs/0000000001/barrier.json", "q/unchecked/x/y"])
