"""tests/unit/test_concurrency.py's storage-backed tests, on MinIO."""

from tests.unit.test_concurrency import *  # noqa: F403
