"""Input discovery of source jobs: offsets by file and content, bounded by the epoch's
data interval."""

from __future__ import annotations

import os
from datetime import date, timedelta

from checkpointing import LocalStorage
from spark_jobs.flights.sources import HEADER_BYTES, split_unreadable
from spark_jobs.runtime import new_input


def _put(st: LocalStorage, key: str, body: bytes = b"a,b\n1,2\n") -> None:
    st.write(key, body)


def test_bound_holds_back_later_days_but_not_late_files(tmp_path):
    st = LocalStorage(tmp_path)
    for day in ("2013-01-01", "2013-01-02", "2013-01-03"):
        _put(st, f"raw/flights/{day}.csv")
    first = new_input(st, "raw/flights/", None, until="2013-01-02")
    assert sorted(first.offsets["files"]) == first.new == ["raw/flights/2013-01-01.csv"]
    assert first.replaced == first.late == []
    # The next epoch, bounded one day later, sees only its own day ...
    second = new_input(st, "raw/flights/", first.offsets, until="2013-01-03")
    assert second.new == ["raw/flights/2013-01-02.csv"] and second.late == []
    # ... and a late file for a past day, and a corrected past file.
    _put(st, "raw/flights/2012-12-31.csv")
    _put(st, "raw/flights/2013-01-01.csv", b"a,b\n1,3\n")
    third = new_input(st, "raw/flights/", second.offsets, until="2013-01-03")
    assert third.new == ["raw/flights/2012-12-31.csv", "raw/flights/2013-01-01.csv"]
    assert third.replaced == ["raw/flights/2013-01-01.csv"]
    assert third.late == ["raw/flights/2012-12-31.csv"]
    # Offsets of earlier versions ({"files": every file}) are read as they were.
    old = new_input(st, "raw/flights/", {"files": first.offsets["files"]}, until="2013-01-03")
    assert old.new == ["raw/flights/2012-12-31.csv", "raw/flights/2013-01-01.csv",
                       "raw/flights/2013-01-02.csv"]
    assert old.replaced == ["raw/flights/2013-01-01.csv"]


def _land(st: LocalStorage, day: str, mtime: float, body: bytes = b"a,b\n1,2\n") -> None:
    key = f"raw/flights/{day}.csv"
    _put(st, key, body)
    os.utime(st.root / key, (mtime, mtime))


def test_offsets_keep_a_window_of_files_not_the_history(tmp_path):
    """A year of daily files, one landed per day: the offsets hold the files of the last
    week (as Spark's file source keeps its seen files), every file is consumed exactly once,
    and a file rewritten after it left the window comes back as a late file (its old rows
    are then retracted by the job)."""
    st = LocalStorage(tmp_path)
    t0, day_s = 1_700_000_000.0, 86400.0
    offsets, consumed, sizes = None, [], []
    for i in range(365):
        day = (date(2013, 1, 1) + timedelta(days=i)).isoformat()
        _land(st, day, t0 + i * day_s)
        found = new_input(st, "raw/flights/", offsets, until=None)
        assert found.new == [f"raw/flights/{day}.csv"] and not found.replaced, (day, found)
        consumed += found.new
        offsets = found.offsets
        sizes.append(len(offsets["files"]))
    assert len(consumed) == len(set(consumed)) == 365
    assert max(sizes) == 8 and sizes[-1] == 8  # 7 days back from the newest, inclusive
    # Rewritten now, long after it aged out: new again, and named a late file.
    _land(st, "2013-01-05", t0 + 365 * day_s, b"a,b\n9,9\n")
    again = new_input(st, "raw/flights/", offsets)
    assert again.new == again.late == ["raw/flights/2013-01-05.csv"]
    assert again.replaced == []


def test_unbounded_and_undated_files(tmp_path):
    st = LocalStorage(tmp_path)
    _put(st, "raw/dims/airlines.csv")
    _put(st, "raw/dims/2099-01-01.csv")
    found = new_input(st, "raw/dims/", None, until="2013-01-02")
    assert list(found.offsets["files"]) == ["raw/dims/airlines.csv"]
    found = new_input(st, "raw/dims/", None)
    assert sorted(found.offsets["files"]) == ["raw/dims/2099-01-01.csv", "raw/dims/airlines.csv"]


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


def test_key_only_offsets_and_other_suffixes(tmp_path):
    """Offsets that list keys only (the aircraft example's before the runtime had a file
    source) count those files as consumed whatever their content; other suffixes work."""
    st = LocalStorage(tmp_path)
    for day in ("2013-01-01", "2013-01-02"):
        _put(st, f"raw/flights/{day}.csv")
    _put(st, "raw/flights/2013-01-01.csv", b"a,b\n5,5\n")  # rewritten: unknown to a key list
    found = new_input(st, "raw/flights/", {"files": ["raw/flights/2013-01-01.csv"]})
    assert found.new == ["raw/flights/2013-01-02.csv"] and found.replaced == found.late == []
    assert sorted(found.offsets["files"]) == ["raw/flights/2013-01-01.csv",
                                              "raw/flights/2013-01-02.csv"]
    assert all(found.offsets["files"].values())  # etags recorded from now on
    _put(st, "raw/events/2013-01-01.json", b"{}")
    _put(st, "raw/events/2013-01-02.json", b"{}")
    _put(st, "raw/events/notes.txt", b"x")
    found = new_input(st, "raw/events/", None, until="2013-01-02", suffix=".json")
    assert found.new == ["raw/events/2013-01-01.json"]


def test_an_index_of_seen_files_finds_a_correction_of_any_age(tmp_path):
    """With a SeenIndex (the runtime keeps one in each source task's state), a file
    rewritten long after it left the window is a replaced file, not a new one; a file that
    is only late (never consumed) stays late; and each epoch reads and rewrites only the
    index buckets (months) of the files it consumes, whatever the history."""
    from spark_jobs.runtime.file_source import SeenIndex

    st = LocalStorage(tmp_path)
    t0, day_s = 1_700_000_000.0, 86400.0
    stored: dict[str, bytes] = {}  # bucket -> document, as the task's state keeps them
    offsets, loads_per_epoch, written_per_epoch = None, [], []

    def epoch(**kw):
        nonlocal offsets
        loads: list[str] = []

        def load(bucket: str):
            loads.append(bucket)
            return SeenIndex.parse(stored[bucket]) if bucket in stored else None

        index = SeenIndex(load)
        found = new_input(st, "raw/flights/", offsets, index=index, **kw)
        stored.update(index.documents())
        offsets = found.offsets
        loads_per_epoch.append(len(loads))
        written_per_epoch.append(len(index.changed))
        return found

    for i in range(365):
        day = (date(2013, 1, 1) + timedelta(days=i)).isoformat()
        _land(st, day, t0 + i * day_s)
        assert epoch().new == [f"raw/flights/{day}.csv"]
    assert sorted(stored) == [f"2013-{m:02d}" for m in range(1, 13)]
    assert sum(len(SeenIndex.parse(d)) for d in stored.values()) == 365
    # Cost follows the change: at most the two months the window spans, every epoch.
    assert max(loads_per_epoch) <= 2 and max(written_per_epoch) == 1
    # A correction of a file consumed 360 days ago: replaced, not new, not late.
    _land(st, "2013-01-05", t0 + 365 * day_s, b"a,b\n9,9\n")
    again = epoch()
    assert again.new == again.replaced == ["raw/flights/2013-01-05.csv"] and again.late == []
    assert loads_per_epoch[-1] <= 3  # January's bucket, and the window's month(s)
    # The same content landed again (a re-upload): nothing new.
    _land(st, "2013-01-05", t0 + 366 * day_s, b"a,b\n9,9\n")
    assert epoch().new == []
    # A late file never consumed is late, not replaced.
    _land(st, "2012-12-31", t0 + 367 * day_s)
    late = epoch()
    assert late.new == late.late == ["raw/flights/2012-12-31.csv"] and late.replaced == []


def test_filesystem_hashes_a_file_again_only_when_its_stamp_changed(tmp_path):
    """On a filesystem the content id is an md5 (a read of the whole file): unchanged files
    in the window are not hashed again (their size and mtime are kept in the offsets), a
    rewritten one is, and an offsets without stamps (an earlier version) hashes as before."""
    st = LocalStorage(tmp_path)
    t0 = 1_700_000_000.0
    for i, day in enumerate(("2013-01-01", "2013-01-02")):
        _land(st, day, t0 + i)
    def heads() -> int:
        return st.stats.snapshot().get("HEAD", 0)

    first = new_input(st, "raw/flights/", None)
    assert heads() == 2 and set(first.offsets["stamps"]) == set(first.new)
    again = new_input(st, "raw/flights/", first.offsets)
    assert again.new == [] and heads() == 2  # nothing hashed
    # Same size, new content, new mtime: hashed, and seen as a correction.
    _land(st, "2013-01-01", t0 + 5, b"a,b\n1,3\n")
    fixed = new_input(st, "raw/flights/", again.offsets)
    assert fixed.replaced == ["raw/flights/2013-01-01.csv"] and heads() == 3
    legacy = {k: v for k, v in fixed.offsets.items() if k != "stamps"}
    assert new_input(st, "raw/flights/", legacy).new == []
    assert heads() == 5
