from __future__ import annotations

import logging
import os
import uuid

import pytest

from bench.harness.s3server import ACCESS_KEY, SECRET_KEY, start_s3_server
from checkpointing.storage import LocalStorage
from checkpointing.storage.s3 import S3Storage
from tests.support.spark_cds import spark_env

# Every Spark JVM the tests start (local sessions, Connect servers, spark-submit drivers and
# executors, the standalone daemons) takes the suite's JVM options, and the class-data
# sharing archive `make test` builds, from the environment. Why: tests/support/spark_cds.py.
for _k, _v in spark_env().items():
    os.environ.setdefault(_k, _v)


def pytest_configure(config):
    """``CKPT_TEST_CPU_LOG=<file>``: each test's wall and CPU seconds (tests/support/cpu_log.py)."""
    # py4j logs "Closing down clientserver connection" at INFO from a finalizer at
    # interpreter exit, after pytest closed the stream its handler writes to: a "Logging
    # error" traceback at the end of every run with a local Spark session.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Under xdist the controller sees every test's report too: only the process that ran
    # the test measures it.
    xdist_controller = bool(getattr(config.option, "numprocesses", None)) and \
        not hasattr(config, "workerinput")
    if os.environ.get("CKPT_TEST_CPU_LOG") and not xdist_controller:
        from tests.support.cpu_log import CpuLog

        config.pluginmanager.register(CpuLog(os.environ["CKPT_TEST_CPU_LOG"]), "ckpt-cpu-log")


#: The tiers, one directory each: unit (no JVM, no server), integration (Spark, MinIO,
#: PostgreSQL, table readers), system (Airflow standalone, the Celery topology, the fault
#: matrices). Each test is marked with its tier (``-m unit``); `make test-fast` is the
#: unit tier.
TIERS = ("unit", "integration", "system")


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier. Then order the modules as tests/support/schedule.py finds
    best for xdist's load-file scheduler (`make test` passes --no-loadscope-reorder, or
    xdist would start the modules with the most tests first): no long module left running
    alone at the end."""
    from collections import Counter

    for item in items:
        parts = item.path.relative_to(config.rootpath).parts
        tier = next((t for t in TIERS if t in parts[:2]), None)
        if tier:
            item.add_marker(getattr(pytest.mark, tier))
    # The *_on_s3 modules run the unit tier's storage-backed tests again on MinIO; a test
    # of theirs that uses no backend ran in the unit tier already.
    again = [i for i in items if i.path.stem.endswith("_on_s3")
             and "backend" not in getattr(i, "fixturenames", ())]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [i for i in items if i not in again]

    from tests.support.schedule import balanced_order

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    rank = {m: i for i, m in enumerate(
        balanced_order(dict(Counter(item.path.name for item in items)), workers))}
    items.sort(key=lambda item: rank[item.path.name])  # stable: order within a module kept


@pytest.fixture(scope="module", autouse=True)
def _connect_mode_stays_in_its_module():
    """A Spark Connect session marks its whole process (pyspark then builds Connect
    expressions, and subprocesses inherit ``SPARK_CONNECT_MODE_ENABLED``); stopping the
    session leaves the mark. A module that opened one must not leave it to the next module
    on the same worker: a local Spark, or `airflow dags test` running local-mode tasks,
    would then refuse to start ("the Spark Connect remote URL has not been set")."""
    keys = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")
    before = {k: os.environ.get(k) for k in keys}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """One Spark Connect server per test process (each xdist worker has its own), the S3
    server's credentials in its environment, as a deployment gives its server a role."""
    from spark_jobs.runtime.connect_server import ConnectServer

    server = ConnectServer(port=0, driver_memory="1500m",  # a free port, race-proof
                           log_path=tmp_path_factory.mktemp("connect") / "server.log",
                           extra_env={"AWS_ACCESS_KEY_ID": ACCESS_KEY,
                                      "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tutorial(tmp_path_factory):
    """The tutorial's /tmp/tutorial after its install block ran as written (the wheel
    built from a copy of the clone, installed into ``venv/`` with its extras): shared by
    the package tier and the tutorial's test, since installing takes minutes."""
    from tests.support.tutorial import install_the_wheel

    return install_the_wheel(tmp_path_factory.mktemp("tutorial"))


@pytest.fixture(scope="session")
def s3_server():
    server = start_s3_server()
    # The library reads credentials from the standard AWS chain, like in production.
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = ACCESS_KEY, SECRET_KEY
    yield server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


@pytest.fixture
def s3_bucket(s3_server):
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_storage(s3_server, s3_bucket):
    return S3Storage(s3_bucket, "root", endpoint_url=s3_server.endpoint)


@pytest.fixture
def local_storage(tmp_path):
    return LocalStorage(tmp_path / "ckpt")


@pytest.fixture
def storage(backend, request, tmp_path):
    """The tier's backend (``backend``: files in the unit tier, MinIO in the integration
    tier's ``*_on_s3`` modules), so each behaviour is checked on both."""
    if backend == "local":
        return LocalStorage(tmp_path / "ckpt")
    return request.getfixturevalue("s3_storage")
