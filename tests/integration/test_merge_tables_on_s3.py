"""tests/unit/test_merge_tables.py's storage-backed tests, on MinIO."""

from tests.unit.test_merge_tables import *  # noqa: F403
