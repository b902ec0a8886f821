"""tests/unit/test_coordinator_parts.py's storage-backed tests, on MinIO."""

from tests.unit.test_coordinator_parts import *  # noqa: F403
