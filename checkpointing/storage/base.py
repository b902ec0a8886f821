"""The small storage interface every backend implements (see docs/PROTOCOL.md, section 2)."""

from __future__ import annotations

import builtins  # the class's own list() shadows the builtin in its annotations
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class ObjectInfo:
    """Metadata of one stored object."""

    key: str
    size: int
    etag: str
    last_modified: float
    #: the storage server's clock when it answered (its ``Date`` header), to age the object
    #: by the clock that dated it; None where the store's clock is this host's
    server_time: float | None = None


class RequestStats:
    """Counts storage requests by kind; thread-safe. Benchmarks read it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


class Storage(ABC):
    """A flat key space with create-once and compare-and-swap writes.

    Keys are relative, '/'-separated and already validated by the caller's layout.
    """

    #: the S3-compatible endpoint a store other than AWS S3 is reached at (MinIO), which
    #: the table formats' libraries and Spark must be given too; None for AWS and files
    endpoint_url: str | None = None

    def __init__(self) -> None:
        self.stats = RequestStats()

    @abstractmethod
    def read(self, key: str) -> tuple[bytes, str]:
        """Return (bytes, etag); raise NotFound."""

    def read_start(self, key: str, nbytes: int) -> bytes:
        """The object's first ``nbytes`` bytes (fewer when it is shorter), without reading
        the rest where the store can (a ranged GET); raise NotFound."""
        return self.read(key)[0][:nbytes]

    @abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Return the object's metadata; raise NotFound."""

    @abstractmethod
    def create(self, key: str, data: bytes) -> str:
        """Write only if absent; return the etag. Raise PreconditionFailed if present."""

    @abstractmethod
    def replace(self, key: str, data: bytes, expected_etag: str) -> str:
        """Write only if the current etag equals ``expected_etag``; raise PreconditionFailed."""

    @abstractmethod
    def write(self, key: str, data: bytes) -> str:
        """Unconditional write; return the etag."""

    @abstractmethod
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in lexicographic key order."""

    @abstractmethod
    def list_dirs(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """Immediate 'sub-directories' under ``prefix`` (which ends with '/'), sorted,
        each returned as the full prefix ending in '/'."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete the object; deleting a missing key is not an error."""

    @abstractmethod
    def upload_file(self, key: str, path: str) -> ObjectInfo:
        """Upload a local file (streamed) unconditionally."""

    @abstractmethod
    def download_file(self, key: str, path: str) -> None:
        """Download to a local path (streamed); raise NotFound."""

    @abstractmethod
    def uri(self, key: str) -> str:
        """The absolute URI of ``key`` (file:///... or s3://bucket/...)."""

    @abstractmethod
    def key_for_uri(self, uri: str) -> str | None:
        """The key for an absolute URI inside this storage's root, else None."""

    def read_optional(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist (optional documents)."""
        from checkpointing.errors import NotFound

        try:
            return self.read(key)[0]
        except NotFound:
            return None

    #: how many cheap checks (:meth:`stamps`) may be in flight at once: one for a store whose
    #: check is a local system call, more for one whose check is a network round trip
    parallel_checks: int = 1

    def stamp(self, key: str) -> tuple[int, str]:
        """(size, stamp) of the object, read without its bytes: the stamp changes whenever
        the object is rewritten, so an object found again with a recorded size and stamp
        holds the bytes it held then. The etag (one HEAD) here: stores derive it from the
        content; a store without such an etag overrides this. Raise NotFound."""
        info = self.head(key)
        return info.size, f"etag:{info.etag}"

    def stamps(self, keys: Sequence[str]) -> dict[str, tuple[int, str] | None]:
        """:meth:`stamp` of each key (None when it is missing), ``parallel_checks`` at a
        time: a restore's check of thousands of unchanged files is then bounded by the
        store's latency divided by that, not multiplied by the file count."""
        from checkpointing.errors import NotFound

        def one(key: str) -> tuple[int, str] | None:
            try:
                return self.stamp(key)
            except NotFound:
                return None

        return dict(zip(keys, self.map_checks(one, keys), strict=True))

    def map_checks(self, fn: Callable[[T], R], items: Sequence[T]) -> builtins.list[R]:
        """``fn`` of each item, in order, ``parallel_checks`` at a time: for checks that
        are a round trip each to this store (a HEAD, a download)."""
        workers = min(self.parallel_checks, len(items))
        if workers <= 1:
            return [fn(i) for i in items]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fn, items))

    def exists(self, key: str) -> bool:
        from checkpointing.errors import NotFound

        try:
            self.head(key)
            return True
        except NotFound:
            return False

    def stored_sha256(self, key: str) -> tuple[str, int] | None:
        """(sha256 hex, size) of the object as the store itself recorded it when the object
        was written (S3's full-object SHA-256 checksum), or None when the store has none:
        the caller then reads the object to hash it."""
        return None

    def describe(self) -> str:
        """A credential-free description for logs and errors."""
        return self.uri("")
