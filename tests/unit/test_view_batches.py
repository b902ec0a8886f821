"""Growing states kept as batches: over drawn sequences of additions, the merge rule keeps
a state to at most MAX_BATCHES batches, whose bytes stay within twice the largest's before
each addition; only states that their rules read as Z-sets (a join's sides) grow."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from checkpointing.ivm.planner import plan_view
from checkpointing.ivm.rules import State, program
from spark_jobs.runtime.views import MAX_BATCHES, due
from tests.support.ivm_histories import SCHEMAS, VIEWS


@given(adds=st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=60),
       limit=st.integers(min_value=2, max_value=MAX_BATCHES))
def test_batches_stay_few_and_within_twice_the_largest(adds, limit):
    batches: list[int] = []
    for a in adds:
        if batches and due(batches, limit):
            batches = [sum(batches)]  # merged: at most the sum (rows may cancel)
        assert len(batches) < limit
        assert sum(batches) <= 2 * max(batches, default=0)
        batches.append(a)


def test_a_batch_is_added_until_the_small_ones_outweigh_the_largest():
    assert not due([])
    assert not due([100, 10, 10])
    assert due([100, 60, 50])  # 110 beside 100
    assert due([100] + [1] * (MAX_BATCHES - 1))
    assert not due([100] + [1] * (MAX_BATCHES - 2))


def test_only_a_join_s_sides_grow():
    grows = {}
    for name, sql in VIEWS.items():
        for s in program(plan_view(sql, SCHEMAS).root, f"{name}__").steps:
            if isinstance(s, State):
                grows[s.name] = s.grows
    joined = {n for n, g in grows.items() if g is not None}
    assert joined and all(n.endswith(("_l", "_r")) for n in joined), joined
    assert any(g is None for g in grows.values())  # aggregates, distinct, top-N rewrite
