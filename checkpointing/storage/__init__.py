"""Storage backends and the URI-based factory."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from checkpointing.errors import StorageError
from checkpointing.storage.base import ObjectInfo, RequestStats, Storage
from checkpointing.storage.local import LocalStorage

__all__ = ["ObjectInfo", "RequestStats", "Storage", "LocalStorage", "open_storage"]


def open_storage(uri: str, *, endpoint_url: str | None = None,
                 region_name: str | None = None) -> Storage:
    """Open ``file:///path``, a plain path, or ``s3://bucket/prefix``.

    For S3, credentials come from the standard AWS chain; ``endpoint_url`` (or the
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` environment variables) selects an
    S3-compatible server such as MinIO.
    """
    if not uri or uri != uri.strip() or "\n" in uri:
        raise StorageError(f"bad storage URI {uri!r}: blank or surrounded by white space; "
                           "use file:///path or s3://bucket/prefix")
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme else uri
        if not path.strip():
            raise StorageError(f"bad storage URI {uri!r}: no path; use file:///path")
        return LocalStorage(path)
    if parsed.scheme in ("s3", "s3a"):
        if not parsed.netloc:
            raise StorageError(f"bad storage URI {uri!r}: expected s3://bucket/prefix")
        from checkpointing.storage.s3 import S3Storage

        endpoint = (endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3")
                    or os.environ.get("AWS_ENDPOINT_URL"))
        return S3Storage(parsed.netloc, parsed.path, endpoint_url=endpoint,
                         region_name=region_name or os.environ.get("AWS_DEFAULT_REGION"))
    raise StorageError(f"unsupported storage URI {uri!r}: use file:///path or s3://bucket/prefix")
