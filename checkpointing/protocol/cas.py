"""Read-modify-write of one document by compare-and-swap."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from checkpointing.errors import NotFound, PreconditionFailed, StorageError
from checkpointing.storage import Storage

T = TypeVar("T")
R = TypeVar("R")

_MAX_ROUNDS = 200


def cas_update(storage: Storage, key: str, parse: Callable[[bytes], T | None],
               mutate: Callable[[T | None], tuple[bytes | None, R]]) -> R:
    """Apply ``mutate`` to the current document until a conditional write lands.

    ``parse`` turns stored bytes into a value; ``mutate`` receives the value (None when the
    document is absent) and returns ``(new_bytes, result)``; ``new_bytes`` None means "no
    change needed". Losing a race re-reads and re-decides: this is the CAS loop, not a blind
    retry. Returns the ``result`` of the round whose write landed.
    """
    for round_ in range(_MAX_ROUNDS):
        try:
            data, etag = storage.read(key)
            current: T | None = parse(data)
        except NotFound:
            etag, current = None, None
        new, result = mutate(current)
        if new is None:
            return result
        try:
            if etag is None:
                storage.create(key, new)
            else:
                storage.replace(key, new, etag)
            return result
        except PreconditionFailed:
            # Back off a little with jitter so that many racing writers spread out.
            time.sleep(random.uniform(0, min(0.002 * (round_ + 1), 0.05)))  # noqa: S311
    raise StorageError(f"gave up updating {storage.uri(key)} after {_MAX_ROUNDS} contended rounds")
