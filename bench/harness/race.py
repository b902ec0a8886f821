"""Threads released at once: the races the coordinator and the table commits must survive."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def race(fn: Callable[[int], Any], n: int = 16) -> tuple[list[Any], list[BaseException]]:
    """Call ``fn(i)`` from ``n`` threads released at once; (results by i, errors raised)."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        gate.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - returned to the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors
