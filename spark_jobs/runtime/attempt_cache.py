"""The DataFrames a task attempt caches, unpersisted when the attempt ends.

Spark's cache manager belongs to the Spark application, not to a session: on a Spark
Connect server every client's session shares it. ``spark.catalog.clearCache()`` at the end
of a task therefore dropped the cached data of every task running beside it, and it holds
the cache manager's lock while it takes each cached relation's, the reverse of the order a
query filling a cached relation takes them: three flights tasks through one server
deadlocked so (a JVM thread dump named the cycle), and their Airflow tries ran until the
epoch's timeout. Unpersisting only the attempt's own DataFrames takes one lock at a time
(``CacheManager.uncacheByCondition``) and leaves the other tasks' caches alone.

DataFrames are recorded when a job calls ``cache()`` or ``persist()`` in the thread that
runs the attempt (:func:`attempt_caches`); one cached in a thread of the job's own is not
recorded, and stays cached until the server drops it."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

log = logging.getLogger("spark_jobs.runtime")

_CACHED: ContextVar[list[Any] | None] = ContextVar("ckpt_attempt_cached", default=None)


def _recording(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def cache(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        cached = _CACHED.get()
        if cached is not None and not any(df is self for df in cached):
            cached.append(self)
        return out

    cache.records_attempt_caches = True  # type: ignore[attr-defined]
    return cache


def _install() -> None:
    """Wrap ``cache`` and ``persist`` of pyspark's DataFrames (classic and Connect), once."""
    classes = []
    with contextlib.suppress(ImportError):
        from pyspark.sql.classic.dataframe import DataFrame as Classic

        classes.append(Classic)
    with contextlib.suppress(ImportError):  # the connect extra is optional
        from pyspark.sql.connect.dataframe import DataFrame as Connect

        classes.append(Connect)
    for cls in classes:
        for name in ("cache", "persist"):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "records_attempt_caches", False):
                setattr(cls, name, _recording(method))


@contextlib.contextmanager
def attempt_caches() -> Iterator[list[Any]]:
    """Record the DataFrames cached in this thread inside the block (the list yielded);
    unpersist them when it ends, whatever it ends with."""
    _install()
    cached: list[Any] = []
    token = _CACHED.set(cached)
    try:
        yield cached
    finally:
        _CACHED.reset(token)
        for df in cached:
            try:
                df.unpersist()
            except Exception as exc:  # noqa: BLE001 - a session that is gone: nothing held
                log.info("end of task: a cached DataFrame not unpersisted (%s)",
                         str(exc).strip().splitlines()[0] if str(exc).strip()
                         else type(exc).__name__)
                break  # the others are in the same session
