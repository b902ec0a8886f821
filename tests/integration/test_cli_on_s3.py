"""tests/unit/test_cli.py's storage-backed tests, on MinIO."""

from tests.unit.test_cli import *  # noqa: F403
