"""tests/unit/test_storage.py's storage-backed tests, on MinIO."""

from tests.unit.test_storage import *  # noqa: F403
