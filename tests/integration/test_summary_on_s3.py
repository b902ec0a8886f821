"""tests/unit/test_summary.py's storage-backed tests, on MinIO."""

from tests.unit.test_summary import *  # noqa: F403
