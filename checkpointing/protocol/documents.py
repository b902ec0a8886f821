"""Encoding and decoding of the versioned JSON documents of docs/PROTOCOL.md."""

from __future__ import annotations

import json
import os
import socket
import uuid
from datetime import UTC, datetime

from checkpointing.errors import MalformedDocument, UnsupportedVersion
from checkpointing.json_types import JsonObject

PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 28
PROTOCOL_VERSION = f"{PROTOCOL_MAJOR}.{PROTOCOL_MINOR}"


def now_iso(ts: float) -> str:
    """Format a POSIX timestamp as the protocol's ISO-8601 UTC string."""
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_iso(value: str) -> float:
    """Parse the protocol's ISO-8601 UTC string back to a POSIX timestamp."""
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def writer_identity() -> JsonObject:
    """A fresh writer record: the nonce makes every conditional write recognisable."""
    return {"nonce": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid()}


def encode(fmt: str, body: JsonObject) -> bytes:
    """Serialise ``body`` as a document of type ``fmt`` at the current protocol version."""
    doc = {"format": fmt, "protocol_version": PROTOCOL_VERSION, **body}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode(data: bytes, fmt: str, key: str, required: tuple[str, ...] = ()) -> JsonObject:
    """Parse and check a document; raise a one-line error naming ``key`` when it is bad."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedDocument(f"malformed document at {key}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise MalformedDocument(f"malformed document at {key}: expected a JSON object")
    version = doc.get("protocol_version")
    if not isinstance(version, str) or not _is_version(version):
        raise MalformedDocument(f"malformed document at {key}: missing or bad protocol_version")
    major = int(version.split(".")[0])
    if major != PROTOCOL_MAJOR:
        raise UnsupportedVersion(
            f"document at {key} has protocol version {version}; this reader implements "
            f"{PROTOCOL_VERSION} (major {PROTOCOL_MAJOR} only)"
        )
    if doc.get("format") != fmt:
        raise MalformedDocument(
            f"malformed document at {key}: format is {doc.get('format')!r}, expected {fmt!r}"
        )
    missing = [f for f in required if f not in doc]
    if missing:
        raise MalformedDocument(
            f"malformed document at {key}: missing field(s) {', '.join(missing)}"
        )
    return doc


def _is_version(v: str) -> bool:
    parts = v.split(".")
    return len(parts) == 2 and all(p.isdigit() for p in parts)
