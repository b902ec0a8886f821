"""tests/unit/test_state.py's storage-backed tests, on MinIO."""

from tests.unit.test_state import *  # noqa: F403
