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
    # an incremental byte ten times dearer than a full one: 60 changed of 1000 is dearer
    costs = RefreshCosts(incremental_ms_per_byte=1.0, full_ms_per_byte=0.05)
    r = _choose(_in(60), costs=costs)
    assert r.mode == "full" and r.estimated_full_ms == 50.0 and r.estimated_incremental_ms == 60
    r = _choose(_in(40), costs=costs)
    assert r.mode == "incremental" and "estimated cheaper" in r.reason
    # one rate alone does not decide: the share does
    assert _choose(_in(60), costs=RefreshCosts(1.0, None)).mode == "incremental"


def test_costs_are_updated_per_mode_and_survive_json():
    c = RefreshCosts().observed("incremental", 100.0, 50).observed("full", 300.0, 1000)
    assert c == RefreshCosts(2.0, 0.3)
    assert c.observed("full", 5.0, 0) == c  # nothing measured per no byte
    rec = ViewRecord(Q, {"t": 10}, c, '{"type":"struct","fields":[]}')
    assert ViewRecord.from_json(rec.to_json()) == rec
    assert ViewRecord.from_json(None) is None and ViewRecord.from_json({}) is None


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2000), st.integers(1, 2000),
                          st.booleans(), st.booleans()), min_size=1, max_size=4),
       st.one_of(st.none(), st.floats(0.001, 10)), st.one_of(st.none(), st.floats(0.001, 10)))
def test_the_choice_follows_its_rules_over_any_inputs(inputs, inc, full):
    changes = [InputChange(f"t{i}", whole, changed, size if changed else 0, total)
               for i, (whole, size, total, changed, _) in enumerate(inputs)]
    costs = RefreshCosts(inc, full)
    r = _choose(changes, costs=costs)
    if any(c.whole for c in changes):
        assert r.mode == "full"
    elif not any(c.changed for c in changes):
        assert r.mode == "incremental"
    elif inc is not None and full is not None:
        ch = sum(c.changed_bytes for c in changes)
        tot = sum(c.input_bytes for c in changes)
        assert (r.mode == "full") == (tot * full < ch * inc)
    else:
        ch = sum(c.changed_bytes for c in changes)
        tot = sum(c.input_bytes for c in changes)
        assert (r.mode == "full") == (ch / tot > 0.5)
    assert "\n" not in r.reason and r.reason


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
