"""Validation of the ids that become parts of storage keys."""

import re

from checkpointing.errors import InvalidId

# Airflow task ids in task groups contain dots ("group.task"); slashes never pass,
# and ".." is refused so that no id can climb out of its prefix.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
#: The same rule as a pattern string, for request validation at an API's edge ('..' is
#: still refused by :func:`validate_id` behind it).
ID_PATTERN = _ID_RE.pattern


def validate_id(value: object, kind: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise :class:`InvalidId`."""
    if not isinstance(value, str) or not _ID_RE.match(value) or ".." in value:
        raise InvalidId(
            f"invalid {kind} {value!r}: use 1-200 characters from A-Z a-z 0-9 _ . -, "
            "starting with a letter or digit, without '..'"
        )
    return value


def validate_epoch_id(value: object) -> int:
    """Return ``value`` as an int if it is a valid epoch id (a positive integer)."""
    if isinstance(value, bool):
        raise InvalidId(f"invalid epoch id {value!r}: must be a positive integer")
    if isinstance(value, str):
        if not value.isdigit():
            raise InvalidId(f"invalid epoch id {value!r}: must be a positive integer")
        value = int(value)
    if not isinstance(value, int) or value < 1 or value >= 10**10:
        raise InvalidId(f"invalid epoch id {value!r}: must be an integer in 1..9999999999")
    return value


def validate_attempt(value: object) -> int:
    """Return ``value`` if it is a valid attempt number (1..9999)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 9999:
        raise InvalidId(f"invalid attempt {value!r}: must be an integer in 1..9999")
    return value
