"""The unit tier: no JVM, no server. Storage-backed tests run on the file system here and
again on MinIO in the integration tier (its ``*_on_s3`` modules)."""

import pytest


@pytest.fixture(params=["local"])
def backend(request):
    """The checkpoint storage backend of the tier: files."""
    return request.param
