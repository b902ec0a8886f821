"""Input discovery of source jobs: offsets by file and content, bounded by the epoch's
data interval."""

from __future__ import annotations

from checkpointing import LocalStorage
from spark_jobs.flights.sources import changed_files


def _put(st: LocalStorage, key: str, body: bytes = b"a,b\n1,2\n") -> None:
    st.write(key, body)


def test_bound_holds_back_later_days_but_not_late_files(tmp_path):
    st = LocalStorage(tmp_path)
    for day in ("2013-01-01", "2013-01-02", "2013-01-03"):
        _put(st, f"raw/flights/{day}.csv")
    cur, new, replaced = changed_files(st, "raw/flights/", {}, until="2013-01-02")
    assert sorted(cur) == new == ["raw/flights/2013-01-01.csv"] and replaced == []
    # The next epoch, bounded one day later, sees only its own day ...
    cur2, new2, _ = changed_files(st, "raw/flights/", cur, until="2013-01-03")
    assert new2 == ["raw/flights/2013-01-02.csv"]
    # ... and a late file for a past day, and a corrected past file.
    _put(st, "raw/flights/2012-12-31.csv")
    _put(st, "raw/flights/2013-01-01.csv", b"a,b\n1,3\n")
    _, new3, replaced3 = changed_files(st, "raw/flights/", cur2, until="2013-01-03")
    assert new3 == ["raw/flights/2012-12-31.csv", "raw/flights/2013-01-01.csv"]
    assert replaced3 == ["raw/flights/2013-01-01.csv"]


def test_unbounded_and_undated_files(tmp_path):
    st = LocalStorage(tmp_path)
    _put(st, "raw/dims/airlines.csv")
    _put(st, "raw/dims/2099-01-01.csv")
    cur, _, _ = changed_files(st, "raw/dims/", {}, until="2013-01-02")
    assert list(cur) == ["raw/dims/airlines.csv"]
    cur, _, _ = changed_files(st, "raw/dims/", {})
    assert sorted(cur) == ["raw/dims/2099-01-01.csv", "raw/dims/airlines.csv"]

