"""The directory behind a local storage URI, for measurements that read files directly."""

from __future__ import annotations

from pathlib import Path

from checkpointing import LocalStorage
from checkpointing.storage import Storage


def local_root(storage: Storage) -> Path:
    """``storage``'s directory; a benchmark given an S3 location where it needs a local one
    stops here, naming it."""
    if not isinstance(storage, LocalStorage):
        raise SystemExit(f"{storage.uri('')} is not local storage: this measurement reads "
                         "its files directly")
    return Path(storage.root)
