"""S3 storage through boto3, for AWS and S3-compatible servers (MinIO, moto).

Atomicity comes from conditional writes: ``If-None-Match: *`` (create-once) and
``If-Match: <etag>`` (compare-and-swap). Transient faults are retried by botocore's
``standard`` retry mode. A conditional write that fails with 412 may be a retry of our own
write that landed, so the object is re-read: if it holds our bytes the write is ours.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import time
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import botocore.session
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from botocore.loaders import create_loader

from checkpointing.errors import NotFound, PreconditionFailed, StorageError
from checkpointing.json_types import JsonObject
from checkpointing.storage.base import ObjectInfo, Storage

_CONFLICT_RETRIES = 5  # 409 ConditionalRequestConflict: a concurrent conditional write
#: What a call to S3 raises. ValueError: a connection cut inside a header's value leaves
#: http.client a header block it takes as complete, and botocore's parser fails on the
#: value ('Invalid timestamp ""' for a Last-Modified cut after its colon).
_S3_ERRORS = (ClientError, BotoCoreError, ValueError)

#: The data loader every S3Storage's session shares: parsing botocore's S3 service model is
#: most of what creating a client costs (70-300 ms each here, about 20 ms with the loader
#: shared), and an epoch opens several storages (each task's data, each table's commit).
#: Only the parsed models are shared: each session still resolves its own credentials, so
#: credentials changed in the environment reach the next storage opened.
_LOADER = create_loader()


#: Attempts per S3 call, the first included, when neither the caller nor AWS
#: (``AWS_MAX_ATTEMPTS``, the config file's ``max_attempts``) says otherwise. botocore's
#: standard mode waits rand(0, 1) x 50 ms x 2^i before retry i of a connection error (at most
#: 20 s), so its default 3 attempts, or the 6 used before, give up within a second or two:
#: a MinIO restart or a DNS blip of seconds failed every call in flight, and each failure
#: spent one of the task's Airflow retries (the container drill's MinIO restart took
#: ``ingest_flights`` to its third and last try). 11 attempts wait at most 46 s in all,
#: about half that typically, before the one-line error; a throttled call (1 s x 2^i) at
#: most 131 s.
DEFAULT_MAX_ATTEMPTS = 11


def _core_session() -> botocore.session.Session:
    core = botocore.session.get_session()
    core.register_component("data_loader", _LOADER)
    return core


def retry_config(max_attempts: int | None = None,
                 core: botocore.session.Session | None = None) -> JsonObject:
    """botocore's ``retries`` setting for a client of checkpoint storage: standard mode,
    ``max_attempts`` attempts per call (the first included, as ``AWS_MAX_ATTEMPTS``
    counts them) if given, else what the AWS configuration says (as the client's session
    ``core`` reads it, a new session if none), else :data:`DEFAULT_MAX_ATTEMPTS`."""
    if max_attempts is None:
        core = core or botocore.session.get_session()
        configured = core.get_config_variable("max_attempts")
        max_attempts = int(configured) if configured else DEFAULT_MAX_ATTEMPTS
    return {"mode": "standard", "total_max_attempts": max_attempts}


def _no_expect_continue(request: Any = None, **_: Any) -> None:
    """Send every PUT's body at once instead of waiting for ``100 Continue``.

    botocore's wait for ``100 Continue`` reads the interim response's headers in a loop that
    never ends when the connection closes after the status line (``_consume_headers``: it
    waits for a blank line, and ``readline`` at EOF returns ``b""`` forever): one proxy or
    load balancer dropping the connection there spins a task at 100% CPU, with no timeout
    and no retry. The fault suite hit it through toxiproxy's ``limit_data``. The header is not
    signed (SigV4 leaves ``Expect`` out), and what it saves, a body sent to a server that
    refuses it, is small for a checkpoint's documents and files (one PUT is at most the
    64 MiB multipart threshold).
    """
    if request is not None:
        request.headers.pop("Expect", None)


class S3Storage(Storage):
    """Storage rooted at ``s3://bucket/prefix``."""

    #: HEADs in flight at once when a restore checks unchanged files (within botocore's
    #: default pool of 10 connections)
    parallel_checks = 8

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        max_attempts: int | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        client: Any = None,
    ):
        super().__init__()
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        if client is None:
            core = _core_session()
            config = Config(
                retries=retry_config(max_attempts, core),
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                s3={"addressing_style": "path"} if endpoint_url else None,
            )
            client = boto3.session.Session(botocore_session=core).client(
                "s3", endpoint_url=endpoint_url, region_name=region_name or "us-east-1",
                config=config,
            )
        self.client = client
        # Count every HTTP request actually sent, retries included.
        self.client.meta.events.register("before-send.s3", self._count)
        self.client.meta.events.register("before-send.s3", _no_expect_continue)
        self._transfer = TransferConfig(multipart_threshold=64 * 1024 * 1024, use_threads=False)

    def _count(self, request: Any = None, **_: Any) -> None:
        method = getattr(request, "method", "GET")
        url = getattr(request, "url", "")
        is_list = method == "GET" and ("list-type=" in url or "delimiter=" in url)
        kind = "LIST" if is_list else method
        self.stats.add(kind)

    # -- helpers ---------------------------------------------------------------------
    def _k(self, key: str) -> str:
        return self.prefix + key

    def _error(self, exc: Exception, key: str) -> Exception:
        """Translate a boto exception into this library's one-line errors."""
        where = self.uri(key)
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchKey", "404", "NotFound"):
                return NotFound(f"not found: {where}")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return PreconditionFailed(f"conditional write lost at {where}")
            if code == "NoSuchBucket":
                return StorageError(f"bucket {self.bucket!r} does not exist at {self._endpoint()}")
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"):
                return StorageError(f"access denied to {where} ({code}): check the credentials")
            return StorageError(f"S3 error {code or status} at {where}")
        if isinstance(exc, NoCredentialsError):
            return StorageError(f"no AWS credentials found for {where}")
        if isinstance(exc, BotoConnectionError):
            return StorageError(f"cannot reach S3 endpoint {self._endpoint()} for {where}")
        if isinstance(exc, HTTPClientError):  # reached, then cut or timed out
            return StorageError(f"S3 endpoint {self._endpoint()} dropped the request for "
                                f"{where} ({type(exc).__name__})")
        if isinstance(exc, ValueError):  # see _S3_ERRORS
            return StorageError(f"S3 failure at {where}: incomplete response (a header "
                                "cut short)")
        return StorageError(f"S3 failure at {where}: {type(exc).__name__}")

    def _endpoint(self) -> str:
        return self.endpoint_url or "AWS S3"

    def _call(self, key: str, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(Bucket=self.bucket, Key=self._k(key), **kwargs)
        except _S3_ERRORS as exc:
            raise self._error(exc, key) from None

    # -- reads -----------------------------------------------------------------------
    def read(self, key: str) -> tuple[bytes, str]:
        resp = self._call(key, self.client.get_object)
        try:
            data = resp["Body"].read()
        except _S3_ERRORS as exc:
            raise self._error(exc, key) from None
        etag = self._complete(key, resp, "ETag", "ContentLength")
        if len(data) != resp["ContentLength"]:
            raise StorageError(f"S3 failure at {self.uri(key)}: incomplete response body "
                               f"({len(data)} of {resp['ContentLength']} bytes)")
        return data, etag

    def read_start(self, key: str, nbytes: int) -> bytes:
        if nbytes <= 0:
            return b""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key),
                                          Range=f"bytes=0-{nbytes - 1}")
            return bytes(resp["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""  # an empty object has no byte 0
            raise self._error(exc, key) from None
        except _S3_ERRORS as exc:  # ClientError is answered above
            raise self._error(exc, key) from None

    def _complete(self, key: str, resp: JsonObject, *fields: str) -> str:
        """The response's ETag, after checking that it carries ``fields``: a connection cut
        inside the headers can leave botocore a response without them, which must be
        an error, never a document read as valid."""
        missing = [f for f in fields if resp.get(f) is None]
        if missing:
            raise StorageError(f"S3 failure at {self.uri(key)}: incomplete response "
                               f"(no {', '.join(missing)})")
        return str(resp["ETag"])

    def head(self, key: str) -> ObjectInfo:
        resp = self._call(key, self.client.head_object)
        etag = self._complete(key, resp, "ETag", "ContentLength", "LastModified")
        return ObjectInfo(key, resp["ContentLength"], etag, resp["LastModified"].timestamp(),
                          _server_time(resp))

    def stored_sha256(self, key: str) -> tuple[str, int] | None:
        """The SHA-256 checksum S3 verified and stored when the object was uploaded with one
        (``x-amz-checksum-sha256``: s3a writes it with
        ``fs.s3a.create.checksum.algorithm=SHA256``), read by one HeadObject instead of
        downloading the object. None without one, or for a multipart upload's checksum of
        its parts' checksums (not the object's SHA-256)."""
        resp = self._call(key, self.client.head_object, ChecksumMode="ENABLED")
        value, size = resp.get("ChecksumSHA256"), resp.get("ContentLength")
        if not value or size is None or "-" in value or \
                resp.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
            return None
        try:
            digest = base64.b64decode(value, validate=True)
        except (ValueError, binascii.Error):
            return None
        return (digest.hex(), int(size)) if len(digest) == 32 else None

    # -- writes ----------------------------------------------------------------------
    def create(self, key: str, data: bytes) -> str:
        return self._conditional_put(key, data, IfNoneMatch="*")

    def replace(self, key: str, data: bytes, expected_etag: str) -> str:
        return self._conditional_put(key, data, IfMatch=expected_etag)

    def _conditional_put(self, key: str, data: bytes, **condition: str) -> str:
        for attempt in range(_CONFLICT_RETRIES):
            try:
                resp = self._call(key, self.client.put_object, Body=data, **condition)
                if resp.get("ETag") is not None:
                    return str(resp["ETag"])
                # A cut response: did the write land? Re-read (below) before anything else.
                raise PreconditionFailed(f"ambiguous write at {self.uri(key)}")
            except PreconditionFailed:
                # Did our own (retried) request land first? Then the bytes are ours.
                try:
                    current, etag = self.read(key)
                except NotFound:
                    if "IfNoneMatch" in condition and attempt + 1 < _CONFLICT_RETRIES:
                        time.sleep(0.05 * (attempt + 1))  # 409 from an in-flight writer
                        continue
                    raise PreconditionFailed(f"conditional write lost at {self.uri(key)}") from None
                if current == data:
                    return etag
                raise
        raise PreconditionFailed(f"conditional write lost at {self.uri(key)}")

    def write(self, key: str, data: bytes) -> str:
        return self._complete(key, self._call(key, self.client.put_object, Body=data), "ETag")

    def upload_file(self, key: str, path: str) -> ObjectInfo:
        try:
            # With its SHA-256, which S3 verifies and keeps (as s3a's uploads do): a later
            # check of the file reads it with one HEAD (stored_sha256), not a download.
            self.client.upload_file(path, self.bucket, self._k(key), Config=self._transfer,
                                    ExtraArgs={"ChecksumAlgorithm": "SHA256"})
        except _S3_ERRORS as exc:
            raise self._error(exc, key) from None
        except Exception as exc:  # boto3's S3UploadFailedError wraps ClientError
            raise StorageError(f"upload to {self.uri(key)} failed: {exc}") from None
        return self.head(key)

    def download_file(self, key: str, path: str) -> None:
        try:
            self.client.download_file(self.bucket, self._k(key), path, Config=self._transfer)
        except _S3_ERRORS as exc:
            raise self._error(exc, key) from None

    def delete(self, key: str) -> None:
        self._call(key, self.client.delete_object)

    # -- listing ---------------------------------------------------------------------
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        kwargs: JsonObject = {"Bucket": self.bucket, "Prefix": self._k(prefix)}
        if start_after:
            kwargs["StartAfter"] = self._k(start_after)
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"][len(self.prefix):], obj["Size"], obj["ETag"],
                                     obj["LastModified"].timestamp())
        except _S3_ERRORS as exc:
            raise self._error(exc, prefix) from None

    def stamps(self, keys: Sequence[str]) -> dict[str, tuple[int, str] | None]:
        """A listing answers up to 1,000 objects' size and ETag (the same ETag a HEAD
        answers) in one request: :data:`_MIN_KEYS_LISTED` or more keys under one folder (a
        state's content-addressed files, ``shared/xx/<sha256>``; a partitioned Spark
        write's files, ``<name>/part=<v>/<file>``) are read by listing the range from the
        first to the last of them, within a budget of one page per
        :data:`_KEYS_PER_LISTED_PAGE` keys, at least one (other epochs' files may lie in
        that range too); what the budget leaves out, and scattered keys, get a HEAD each,
        ``parallel_checks`` at a time."""
        found: dict[str, tuple[int, str] | None] = {}
        groups: dict[str, list[str]] = {}
        for key in keys:
            groups.setdefault(key.rsplit("/", 2)[0] + "/", []).append(key)
        rest: list[str] = []
        for folder, members in groups.items():
            if len(members) < _MIN_KEYS_LISTED:
                rest.extend(members)
                continue
            wanted, budget = set(members), -(-len(members) // _KEYS_PER_LISTED_PAGE) * 1000
            first, last = min(members), max(members)
            for n, info in enumerate(self.list(folder, start_after=_just_before(first))):
                if info.key > last or n >= budget:
                    break
                if info.key in wanted:
                    found[info.key] = (info.size, f"etag:{info.etag}")
            rest.extend(k for k in members if k not in found)
        found.update(super().stamps(rest))
        return {k: found[k] for k in keys}

    def list_dirs(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        kwargs: JsonObject = {"Bucket": self.bucket, "Prefix": self._k(prefix),
                                  "Delimiter": "/"}
        if start_after:
            kwargs["StartAfter"] = self._k(start_after)
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                for cp in page.get("CommonPrefixes", []):
                    yield cp["Prefix"][len(self.prefix):]
        except _S3_ERRORS as exc:
            raise self._error(exc, prefix) from None

    # -- misc ------------------------------------------------------------------------
    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"

    def key_for_uri(self, uri: str) -> str | None:
        root = f"s3://{self.bucket}/{self.prefix}"
        return uri[len(root):] if uri.startswith(root) else None


#: the listing of a folder's keys may read one page (1,000 objects) per this many keys: at
#: most 1/100 of the HEADs it replaces
_KEYS_PER_LISTED_PAGE = 100
#: a folder's keys are listed rather than HEADed from this many on. A history epoch's state
#: at TPC-H SF 1 (80 month buckets, one partitioned write) took 79 HEADs at every later
#: begin under the listing's former threshold of 100 keys; a page read in vain (the keys
#: scattered among other epochs' files) costs one request more than the HEADs alone.
_MIN_KEYS_LISTED = 10


def _just_before(key: str) -> str | None:
    """A ``StartAfter`` that includes ``key`` itself: the key without its last character
    (every key is longer than its folder, so the result stays within it)."""
    return key[:-1] or None


def _server_time(resp: JsonObject) -> float | None:
    """The server's clock from the response's ``Date`` header (RFC 7231, 1 s resolution)."""
    date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        return None
    try:
        return email.utils.parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError):
        return None
