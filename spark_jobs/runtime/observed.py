"""Metrics a job observes while an action runs (Spark's ``Observation``), with a way to
compute them again should they not come back.

A Spark Connect 4.1 server sends an observation that was not ready within 100 ms of the
action's end as an empty one (SPARK-54279, seen on a loaded machine): read naively, a count
is then missing, or a per-partition tally silently has no entry. Observed metrics are
aggregates, so an empty result always means they were lost."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("spark_jobs.runtime")


def observed(obs: Any, again: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``obs``'s metrics after the action that observed them ran, or ``again()`` (the same
    aggregates computed by a job of their own) when they came back empty."""
    got = dict(obs.get)
    if got:
        return got
    log.info("observed metrics did not come back with their action: computed again")
    return again()
