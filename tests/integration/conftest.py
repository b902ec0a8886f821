"""The integration tier: Spark (local, standalone, Connect), MinIO, PostgreSQL and the
table formats' readers. Its ``*_on_s3`` modules run the unit tier's storage-backed tests
again on MinIO."""

import pytest


@pytest.fixture(params=["s3"])
def backend(request):
    """The checkpoint storage backend of the tier: a real S3-compatible server."""
    return request.param


@pytest.fixture(scope="module")
def connect_session(spark_connect, request):
    """A Spark Connect session of the module (named after it) on the worker's server."""
    from spark_jobs.runtime import spark_session

    session = spark_session(request.module.__name__.rsplit(".", 1)[-1],
                            remote=spark_connect.url)
    yield session
    session.stop()
