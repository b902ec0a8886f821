"""Where storage lives, kept out of what users read: REST answers, task failures and logs."""

from __future__ import annotations


def spellings(root: str) -> tuple[str, ...]:
    """The ways a message may write a storage root (a URI, or a local path with or without
    ``file://``; an ``s3://`` root also as Spark spells it, ``s3a://``), the root as given
    first: replaced in this order, a ``file://`` URI is not left as ``file://<storage>``."""
    root = root.rstrip("/")
    if not root:
        return ()
    found = [root]
    if root.startswith("file://"):
        found.append(root[len("file://"):])
    if root.startswith("s3://"):
        found.append(f"s3a://{root[len('s3://'):]}")
    return tuple(found)


def redact(text: str, *roots: str) -> str:
    """``text`` with each storage root, in each of its :func:`spellings`, written
    ``<storage>``: a message still names the document (``<storage>/p/epochs/...``) without
    saying where it lives."""
    for root in roots:
        for spelling in spellings(root):
            text = text.replace(spelling, "<storage>")
    return text
