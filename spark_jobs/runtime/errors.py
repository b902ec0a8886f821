"""What a job raises to end its attempt in a way the runtime reports by name."""

from __future__ import annotations

from .connect import SparkConnectError


class DeclineEpoch(Exception):
    """Raised by a job to decline its epoch (bad data, failed validation)."""


class ConnectUnsupported(SparkConnectError):
    """A job used a feature Spark Connect does not have (sparkContext, RDDs, the JVM)."""


class JobResultError(TypeError):
    """A job returned what cannot be its state handle's (not a ``JobResult``, or a value
    JSON cannot hold in its offsets, row counts or metrics): the job's own mistake, named
    in one line when it returns, before anything is acknowledged."""
