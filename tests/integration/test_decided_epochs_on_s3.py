"""tests/unit/test_decided_epochs.py's storage-backed tests, on MinIO."""

from tests.unit.test_decided_epochs import *  # noqa: F403
