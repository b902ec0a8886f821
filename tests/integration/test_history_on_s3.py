"""tests/unit/test_history.py's storage-backed tests, on MinIO."""

from tests.unit.test_history import *  # noqa: F403
