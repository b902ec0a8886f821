"""ingest_flights: the flights source (see source_job for the contract)."""

from __future__ import annotations

from .landing import FLIGHT_COLUMNS
from .source_job import SourceSpec, make_source_job

FLIGHTS = SourceSpec(
    name="flights", prefix="raw/flights/", columns=FLIGHT_COLUMNS,
    ints=frozenset({"year", "month", "day", "sched_dep_time", "sched_arr_time", "flight",
                    "distance", "hour", "minute"}),
    doubles=frozenset({"dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"}),
    required=["year", "month", "day", "carrier", "flight", "origin", "dest", "sched_dep_time",
              "distance"],
    natural_key=["year", "month", "day", "carrier", "flight", "origin"],
    ranges={"month": (1, 12), "day": (1, 31), "hour": (0, 23), "minute": (0, 59),
            "distance": (1, 6000), "dep_delay": (-1440, 1440), "arr_delay": (-1440, 1440),
            "year": (2013, 2013)},
)
BRONZE_SCHEMA = FLIGHTS.bronze_schema
ingest_flights = make_source_job(FLIGHTS, "ingest_flights", __name__)
