"""An independent computation of the gold tables with pandas over the raw CSV files:
no Spark, no job code. Used to check the pipeline's published output."""

from __future__ import annotations

import io
from collections.abc import Callable

import pandas as pd

from checkpointing import Coordinator, read_manifest
from checkpointing.storage import Storage

KEY = ["year", "month", "day", "carrier", "flight", "origin"]
REQUIRED = ["year", "month", "day", "carrier", "flight", "origin", "dest", "sched_dep_time",
            "distance"]
NUMERIC = ["year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
           "sched_arr_time", "arr_delay", "flight", "distance", "air_time", "hour", "minute"]
RANGES = {"month": (1, 12), "day": (1, 31), "hour": (0, 23), "minute": (0, 59),
          "distance": (1, 6000), "dep_delay": (-1440, 1440), "arr_delay": (-1440, 1440),
          "year": (2013, 2013)}
METRIC_COLS = ["flights", "cancelled", "dep_delay_sum", "dep_delay_n", "dep_delay_max",
               "arr_delay_sum", "arr_delay_n", "arr_delay_max", "distance_sum"]
INTS = {"year", "month", "day", "sched_dep_time", "sched_arr_time", "flight", "distance",
        "hour", "minute"}


def clean_flights(files: dict[str, bytes]) -> tuple[pd.DataFrame, int, list[str]]:
    """(accepted rows, malformed row count, unreadable files) under the documented rules."""
    frames, bad, unreadable = [], 0, []
    for key, data in sorted(files.items()):
        try:
            df = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
        except (UnicodeDecodeError, pd.errors.ParserError):
            unreadable.append(key)
            continue
        if "dep_delay" not in df.columns:
            unreadable.append(key)
            continue
        ok = pd.Series(True, index=df.index)
        for c in REQUIRED:
            ok &= df[c].str.strip() != ""
        num = {}
        for c in NUMERIC:
            v = pd.to_numeric(df[c].replace("", None), errors="coerce")
            ok &= ~((df[c].str.strip() != "") & v.isna())
            if c in INTS:
                ok &= ~(v.notna() & (v != v.round()))
            num[c] = v
        for c, (lo, hi) in RANGES.items():
            ok &= ~(num[c].notna() & ((num[c] < lo) | (num[c] > hi)))
        bad += int((~ok).sum())
        good = df[ok].copy()
        for c in NUMERIC:
            good[c] = num[c][ok]
        frames.append(good)
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return rows.drop_duplicates(KEY), bad, unreadable


def stats(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = rows.assign(cancelled=rows["dep_time"].isna().astype(int)).groupby(keys)
    out = pd.DataFrame({
        "flights": g.size(),
        "cancelled": g["cancelled"].sum(),
        "dep_delay_sum": g["dep_delay"].sum(min_count=1),
        "dep_delay_n": g["dep_delay"].count(),
        "dep_delay_max": g["dep_delay"].max(),
        "arr_delay_sum": g["arr_delay"].sum(min_count=1),
        "arr_delay_n": g["arr_delay"].count(),
        "arr_delay_max": g["arr_delay"].max(),
        "distance_sum": g["distance"].sum().astype(float),
    }).reset_index()
    return out.sort_values(keys).reset_index(drop=True)


def published(c: Coordinator, output: str) -> pd.DataFrame:
    """The currently published version of a gold table, read with pandas."""
    m = read_manifest(c.storage, c.layout)
    out = m.outputs[output]
    if out.meta.get("table", {}).get("format") == "iceberg":  # pyiceberg at the snapshot
        from checkpointing.tables.iceberg import open_table as open_iceberg
        from checkpointing.tables.spec import TableSpec

        return open_iceberg(TableSpec.from_json(out.meta["table"]),
                            c.storage.endpoint_url).scan(
            snapshot_id=out.meta["table_version"]).to_pandas()
    if "table" in out.meta:  # a Delta table: read by delta-rs at the epoch's version
        from checkpointing.tables.delta import open_table

        return open_table(out.meta["table"]["location"],
                          c.storage.endpoint_url,
                          out.meta["table_version"]).to_pandas()
    frames = [pd.read_parquet(io.BytesIO(c.storage.read(c.storage.key_for_uri(f.uri))[0]))
              for f in out.files]
    return pd.concat(frames, ignore_index=True)


def raw_files(data: Storage, until: str | None = None) -> dict[str, bytes]:
    """The raw flight files, optionally only those of days before ``until``."""
    return {o.key: data.read(o.key)[0] for o in data.list("raw/flights/")
            if until is None or o.key.rsplit("/", 1)[-1][:10] < until}


def assert_gold_matches_oracle(c: Coordinator, data: Storage, keys: list[str],
                               output: str, until: str | None = None,
                               prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
                               ) -> None:
    """The published ``output`` equals the statistics per ``keys`` of the accepted raw rows
    (of days before ``until``), after ``prepare`` when a job normalises them first."""
    rows, _, _ = clean_flights(raw_files(data, until))
    want = stats(prepare(rows) if prepare else rows, keys)
    got = published(c, output)[keys + METRIC_COLS].sort_values(keys).reset_index(drop=True)
    assert len(got) == len(want)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, check_exact=False, rtol=1e-9)
