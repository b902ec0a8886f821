"""tests/unit/test_coordinator.py's storage-backed tests, on MinIO."""

from tests.unit.test_coordinator import *  # noqa: F403
