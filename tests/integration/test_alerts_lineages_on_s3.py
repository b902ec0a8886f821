"""tests/unit/test_alerts_lineages.py's storage-backed tests, on MinIO."""

from tests.unit.test_alerts_lineages import *  # noqa: F403
