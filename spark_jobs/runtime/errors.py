"""What a job raises to end its attempt in a way the runtime reports by name."""

from __future__ import annotations

from .connect import SparkConnectError


class DeclineEpoch(Exception):
    """Raised by a job to decline its epoch (bad data, failed validation)."""


class ConnectUnsupported(SparkConnectError):
    """A job used a feature Spark Connect does not have (sparkContext, RDDs, the JVM)."""
