"""Where storage lives, kept out of what users read: REST answers and task failures."""

from __future__ import annotations


def redact(text: str, *roots: str) -> str:
    """``text`` with each storage root (a URI, or a local path with or without ``file://``;
    an ``s3://`` root also as Spark spells it, ``s3a://``) written ``<storage>``: a message
    still names the document (``<storage>/p/epochs/...``) without saying where it lives."""
    for root in roots:
        root = root.rstrip("/")
        if root:
            text = text.replace(root, "<storage>")
            if root.startswith("file://"):
                text = text.replace(root[len("file://"):], "<storage>")
            if root.startswith("s3://"):
                text = text.replace(f"s3a://{root[len('s3://'):]}", "<storage>")
    return text
