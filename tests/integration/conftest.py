"""The integration tier: Spark (local, standalone, Connect), MinIO, PostgreSQL and the
table formats' readers. Its ``*_on_s3`` modules run the unit tier's storage-backed tests
again on MinIO."""

import pytest


@pytest.fixture(params=["s3"])
def backend(request):
    """The checkpoint storage backend of the tier: a real S3-compatible server."""
    return request.param
