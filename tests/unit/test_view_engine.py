"""The Spark engine sends the relations it holds with each statement (Spark's SQL with
DataFrame arguments): a relation's unquoted name becomes an argument; a string literal, a
quoted identifier (the rules quote every column), a comment or a longer word that holds
the name is left as it is, and every other brace is escaped. Over drawn statements,
formatting the template with each argument's own name gives the statement back."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.runtime.views import bind

HELD = ("in_orders", "v_t__s3", "v_t__d12")
_name = st.sampled_from(HELD)
_text = st.text(alphabet="ab{}_ 1'\\", max_size=6)
TOKENS = st.one_of(
    _name.map(lambda n: ("held", n)),
    st.sampled_from(["SELECT", "*", "FROM", "JOIN", ",", "(", ")", "=", "x", "v_t__d1",
                     "in_orders_x", "xin_orders", "1", "{", "}", "{}"]).map(lambda t: ("", t)),
    st.tuples(_name, _text).map(lambda p: ("", "'" + p[0] + p[1].replace("\\", "\\\\")
                                           .replace("'", "\\'") + "'")),
    _name.map(lambda n: ("", f"`{n}`")),
    _name.map(lambda n: ("", f"-- {n} {{x}}\n")),
    _name.map(lambda n: ("", f"/* {n} */")),
)


@given(st.lists(TOKENS, max_size=30))
def test_a_statement_s_held_names_and_only_those_become_arguments(tokens):
    sql = " ".join(t for _, t in tokens)
    frames: dict = {}
    template = bind(sql, {n: f"<{n}>" for n in HELD}, frames)
    assert string.Formatter().vformat(template, (), {k: v[1:-1] for k, v in frames.items()}) \
        == sql
    assert sorted(v[1:-1] for v in frames.values()) == \
        sorted({t for kind, t in tokens if kind == "held"})


def test_nothing_held_leaves_the_statement_as_it_is():
    assert bind("SELECT '{' FROM in_orders", {}, {}) == "SELECT '{' FROM in_orders"
