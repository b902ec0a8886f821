"""The refresh planner's rules, one by one, and over drawn sequences of epochs: a full
refresh exactly when the query has no plan, there is no state of this query, an input is
read whole, or the cost (recorded, or the share before any is) says so; an epoch with no
change is always maintained (its states carried). The view task's plan entry survives the
barrier's JSON."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointing.ivm.refresh import (
    OBSERVATIONS,
    InputChange,
    RefreshCosts,
    ViewRecord,
    choose,
    query_id,
)
from checkpointing.protocol.barrier import plan_from_edges, plan_from_json, plan_to_json
from checkpointing.protocol.table_inputs import TableInput
from checkpointing.protocol.view_task import ViewTask

Q = query_id("SELECT k, COUNT(*) AS n FROM t GROUP BY k")
KEPT = ViewRecord(Q, {"t": 1000})
NO_COSTS = RefreshCosts()


def _in(changed: int, total: int = 1000, whole: bool = False) -> list[InputChange]:
    return [InputChange("t", whole, changed > 0, changed, total)]


def _choose(inputs, kept=KEPT, fallback=None, costs=NO_COSTS, query=Q):
    return choose(fallback=fallback, kept=kept, query=query, inputs=inputs, costs=costs,
                  full_above=0.5)


def test_forced_full_refreshes_say_why():
    assert _choose(_in(1), fallback="a window function (ROW_NUMBER)").reason == \
        "not incremental: a window function (ROW_NUMBER)"
    assert "first epoch" in _choose(_in(1), kept=None).reason
    assert "query changed" in _choose(_in(1), query=query_id("SELECT 1")).reason
    whole = _choose(_in(1000, whole=True))
    assert whole.mode == "full" and "t read whole" in whole.reason


def test_states_kept_in_another_layout_are_not_read(monkeypatch):
    """The same query, its states kept by rules of another layout (a rule that keeps a
    column more or less): the next refresh is a full one."""
    from checkpointing.ivm import refresh

    sql = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"
    assert _choose(_in(1), query=query_id(sql)).mode == "incremental"
    monkeypatch.setattr(refresh, "STATE_LAYOUT", refresh.STATE_LAYOUT + 1)
    moved = _choose(_in(1), query=query_id(sql))
    assert moved.mode == "full" and "layout" in moved.reason


def test_no_change_is_maintained_and_the_share_decides_before_any_cost():
    assert _choose(_in(0)).mode == "incremental"
    assert "no input changed" in _choose(_in(0)).reason
    assert _choose(_in(100)).mode == "incremental"
    big = _choose(_in(600))
    assert big.mode == "full" and "60%" in big.reason


def test_recorded_costs_decide_once_both_are_known():
    # incremental: 10 ms fixed + 1 ms a byte (a line through two sizes); full: 0.05 ms a
    # byte of input (one size: all of it per byte)
    costs = RefreshCosts(incremental=((10, 20.0), (100, 110.0)), full=((1000, 50.0),))
    r = _choose(_in(60), costs=costs)
    assert r.mode == "full" and r.estimated_full_ms == 50.0 and r.estimated_incremental_ms == 70
    r = _choose(_in(30), costs=costs)
    assert r.mode == "incremental" and "estimated cheaper" in r.reason
    # one mode alone does not decide: the share does
    assert _choose(_in(60), costs=RefreshCosts(incremental=((10, 20.0),))).mode == \
        "incremental"


def test_a_refresh_s_fixed_cost_is_not_extrapolated_per_byte():
    """One incremental refresh of 500 bytes took 5 s, nearly all of it fixed cost (a Spark
    job per statement); a full one took 6 s over a megabyte. A change of 1,500 bytes is
    not estimated at 15 s (three times 500 bytes' time): it is 5 s and a little, and
    maintained; a change of most of the input is still recomputed."""
    costs = RefreshCosts(incremental=((500, 5000.0),), full=((1_000_000, 6000.0),))
    small = _choose(_in(1500, total=1_000_000), costs=costs)
    assert small.mode == "incremental", small.reason
    assert small.estimated_incremental_ms == pytest.approx(5006.0)
    big = _choose(_in(900_000, total=1_000_000), costs=costs)
    assert big.mode == "full", big.reason


def test_costs_are_updated_per_mode_and_survive_json():
    c = RefreshCosts().observed("incremental", 100.0, 50).observed("full", 300.0, 1000)
    assert c == RefreshCosts(((50, 100.0),), ((1000, 300.0),))
    assert c.observed("full", 5.0, 0) == c  # nothing measured per no byte
    many = c
    for i in range(1, 11):
        many = many.observed("incremental", float(i), i)
    assert len(many.incremental) == OBSERVATIONS and many.incremental[-1] == (10, 10.0)
    assert many.full == c.full
    rec = ViewRecord(Q, {"t": 10}, many, '{"type":"struct","fields":[]}')
    assert ViewRecord.from_json(rec.to_json()) == rec
    assert ViewRecord.from_json(None) is None and ViewRecord.from_json({}) is None
    # a record written before sizes were kept: its rates are dropped, costs measured again
    old = {"query_sha256": Q, "costs": {"incremental_ms_per_byte": 2.0,
                                        "full_ms_per_byte": 0.3}}
    assert ViewRecord.from_json(old).costs == RefreshCosts()


@given(st.floats(0, 10_000), st.floats(0, 10),
       st.lists(st.integers(1, 10**9), min_size=2, max_size=OBSERVATIONS))
def test_a_line_through_sizes_that_span_enough_is_recovered(fixed, rate, sizes):
    if max(sizes) < 2 * min(sizes):
        sizes = [*sizes, 2 * max(sizes)]
    points = tuple((s, fixed + rate * s) for s in sizes)
    inc, _ = RefreshCosts(points, ((1000, 1.0),)).models()
    for s in (min(sizes), max(sizes), 3 * max(sizes)):
        assert inc.at(s) == pytest.approx(fixed + rate * s, rel=1e-6, abs=1e-3)


observation = st.tuples(st.integers(1, 10**7), st.floats(0, 1e6))


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2000), st.integers(1, 2000),
                          st.booleans(), st.booleans()), min_size=1, max_size=4),
       st.lists(observation, max_size=4), st.lists(observation, max_size=4),
       st.integers(0, 10**8))
def test_the_choice_follows_its_rules_over_any_inputs(inputs, inc, full, size):
    changes = [InputChange(f"t{i}", whole, changed, size if changed else 0, total)
               for i, (whole, size, total, changed, _) in enumerate(inputs)]
    costs = RefreshCosts(tuple(inc), tuple(full))
    r = _choose(changes, costs=costs)
    models = costs.models()
    if any(c.whole for c in changes):
        assert r.mode == "full"
    elif not any(c.changed for c in changes):
        assert r.mode == "incremental"
    elif models is not None:
        ch = sum(c.changed_bytes for c in changes)
        tot = sum(c.input_bytes for c in changes)
        assert (r.mode == "full") == (models[1].at(tot) < models[0].at(ch))
    else:
        ch = sum(c.changed_bytes for c in changes)
        tot = sum(c.input_bytes for c in changes)
        assert (r.mode == "full") == (ch / tot > 0.5)
    assert "\n" not in r.reason and r.reason
    if models is not None:  # estimates are never negative, and never fall as sizes grow
        for m in models:
            assert 0 <= m.at(size) <= m.at(size + 1)


def test_a_view_task_is_carried_by_the_barrier_s_plan():
    view = ViewTask("SELECT k, COUNT(*) AS n FROM t GROUP BY k", "counts",
                    {"location": "s3://lake/gold/counts", "format": "delta"},
                    verify_every=7, full_refresh_above=0.3)
    plan = plan_from_edges({"counts": [], "other": []}, {"counts"},
                           {"counts": {"t": TableInput("s3://lake/bronze/t")}},
                           {"counts": view})
    back = plan_from_json(plan_to_json(plan))
    assert back["counts"].view == view and back["other"].view is None
    assert "view" not in plan_to_json(plan)["other"]


@pytest.mark.parametrize("kwargs, message", [
    ({"sql": " "}, "needs its query"),
    ({"table": {}}, "needs a location"),
    ({"verify_every": -1}, "verify_every"),
    ({"full_refresh_above": 0}, "full_refresh_above"),
    ({"output": "bad name!"}, "view output name"),
])
def test_a_view_task_is_refused_in_one_line(kwargs, message):
    args = {"sql": "SELECT 1 AS x FROM t", "output": "out",
            "table": {"location": "file:///tmp/out"}, **kwargs}
    with pytest.raises(ValueError, match=message) as refused:
        ViewTask(**args)
    assert "\n" not in str(refused.value)
