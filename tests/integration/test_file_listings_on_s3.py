"""tests/unit/test_file_listings.py's storage-backed tests, on MinIO."""

from tests.unit.test_file_listings import *  # noqa: F403
