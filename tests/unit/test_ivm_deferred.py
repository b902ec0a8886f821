"""Deferred statements fold into the query that reads them: every statement it reads,
directly or through others, once, in the order defined, and nothing it does not read (a
name that another begins with is not read by it)."""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointing.ivm.deferred import Deferred
from checkpointing.ivm.rules import relation_pattern, relations_read
from tests.support.ivm_duckdb import in_duckdb


def _deferred() -> Deferred:
    d = Deferred()
    d.add("v__d1", "SELECT 1 AS x UNION ALL SELECT 2 AS x")
    d.add("v__d12", "SELECT x * 10 AS x FROM v__d1")
    d.add("v__d2", "SELECT x + 1 AS x FROM `v__d12` UNION ALL SELECT x FROM v__d1")
    d.add("v__unread", "SELECT 99 AS x")
    return d


def test_a_query_holds_what_it_reads_through_others_in_order_and_nothing_else():
    d = _deferred()
    assert d.reads("SELECT * FROM v__d2") == ["v__d1", "v__d12", "v__d2"]
    assert d.reads("SELECT * FROM `v__d12`") == ["v__d1", "v__d12"]
    assert d.reads("SELECT * FROM v__d1x JOIN s_v__d1 USING (x)") == []
    assert d.fused("SELECT 3") == "SELECT 3"


def test_the_fused_query_equals_the_statements_run_one_by_one():
    d = _deferred()
    con = duckdb.connect()
    fused = sorted(con.execute(in_duckdb(d.fused("SELECT x FROM v__d2"))).fetchall())
    for name, sql in d.statements.items():
        con.execute(f'CREATE TABLE "{name}" AS {in_duckdb(sql)}')
    assert fused == sorted(con.execute('SELECT x FROM "v__d2"').fetchall()) == \
        [(1,), (2,), (11,), (21,)]


_WORD = st.text("abd12_", min_size=1, max_size=4)


@settings(max_examples=400, deadline=None)
@given(names=st.lists(_WORD, min_size=1, max_size=6, unique=True),
       sql=st.lists(st.one_of(_WORD, st.sampled_from(["`", " ", ".", "(", ",", "é", "``"])),
                    max_size=30).map("".join))
def test_reads_are_found_as_one_pattern_of_the_names_finds_them(names, sql):
    """The names a statement reads, found with one pattern for every set of names, are
    those a pattern of exactly these names finds, in order: quoted or not, a name another
    begins with, next to a dot, inside other text."""
    assert relations_read(sql, set(names)) == relation_pattern(names).findall(sql)


def test_names_with_other_characters_are_found_whole():
    # A view's namespace may hold a dot: the longer name is read, not the one it starts.
    assert relations_read("SELECT * FROM `gold.v__d1` JOIN gold", {"gold", "gold.v__d1"}) \
        == ["gold.v__d1", "gold"]
    assert relations_read("SELECT 1", set()) == []
