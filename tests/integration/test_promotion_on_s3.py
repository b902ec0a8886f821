"""tests/unit/test_promotion.py's storage-backed tests, on MinIO."""

from tests.unit.test_promotion import *  # noqa: F403
