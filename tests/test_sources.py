"""Input discovery of source jobs: offsets by file and content, bounded by the epoch's
data interval."""

from __future__ import annotations

from checkpointing import LocalStorage
from spark_jobs.flights.sources import HEADER_BYTES, changed_files, split_unreadable


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



def test_headers_are_checked_from_the_first_bytes_only(tmp_path):
    st = LocalStorage(tmp_path)
    ok = "a,b\n" + "é,1\n" * 10_000  # a two-byte character cut at HEADER_BYTES
    _put(st, "raw/ok.csv", ok.encode())
    _put(st, "raw/other.csv", b"x,y\n1,2\n")
    _put(st, "raw/binary.csv", b"\xff\xfe\x00a,b\n")
    _put(st, "raw/empty.csv", b"")
    _put(st, "raw/long.csv", b"a" * (HEADER_BYTES + 10) + b"\n")
    reads = []
    real = st.read_start
    st.read_start = lambda key, n: (reads.append(n), real(key, n))[1]
    keys = ["raw/ok.csv", "raw/other.csv", "raw/binary.csv", "raw/empty.csv", "raw/long.csv"]
    readable, unreadable = split_unreadable(st, keys, ["a", "b"])
    assert readable == ["raw/ok.csv"]
    assert dict(unreadable) == {"raw/other.csv": "bad_header", "raw/binary.csv": "not_utf8",
                                "raw/empty.csv": "bad_header", "raw/long.csv": "bad_header"}
    assert reads == [HEADER_BYTES] * len(keys)
