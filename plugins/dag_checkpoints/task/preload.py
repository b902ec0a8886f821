"""Imports a checkpointed Spark task needs before its job starts, made once per worker
instead of once per task.

Every Airflow task runs in a process of its own, forked by its worker. Imported in that
process, the job runtime, the Spark Connect client (gRPC, protobuf, pandas, pyarrow) and a
job's own heavy libraries (Great Expectations takes about 1.5 s) cost each task the same
again. Airflow 3.3 can start LocalExecutor's workers from a forkserver that imports modules
first (``[scheduler] mp_start_method = forkserver``, ``mp_forkserver_preload``): the workers
and the task processes they fork inherit those modules copy-on-write. This module is the
provider's entry for that list::

    [scheduler]
    mp_start_method = forkserver
    mp_forkserver_preload = dag_checkpoints.task.preload,great_expectations

Add the modules your own jobs import (above, the flights pipeline's GX). Importing only
loads code: no Spark session, gRPC channel, thread or storage client exists before the fork
(:func:`extra_threads` lists any thread). A module that is not installed on the worker is
skipped: a scheduler without Spark still starts.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any

log = logging.getLogger(__name__)

#: what every checkpointed task imports before its job, heaviest last
MODULES = (
    # Airflow's own: the LocalExecutor worker and the task runner its forks run
    "airflow.executors.local_executor",
    "airflow.sdk.execution_time.supervisor",
    "airflow.sdk.execution_time.task_runner",
    "checkpointing",
    "dag_checkpoints.operators.spark",
    "spark_jobs.runtime",
    "spark_jobs.runtime.unchecked",
    "pandas",
    "pyarrow",
    # the Spark Connect client (connect mode): what connect_session imports
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.functions",
    # table outputs committed from the task process (write_table's staging, delta-rs)
    "deltalake",
)


def preload(modules: tuple[str, ...] = MODULES) -> list[str]:
    """Import ``modules``, skipping those not installed; returns the ones imported. A
    module that fails otherwise is skipped too, named in the log: the forkserver must start
    whatever it could not preload (a task imports it again)."""
    done = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        except Exception as exc:  # noqa: BLE001 - the forkserver must come up regardless
            log.warning("preload: %s not imported (%s: %s)", name, type(exc).__name__, exc)
            continue
        done.append(name)
    return done


def extra_threads() -> list[str]:
    """The names of the threads running now besides the main one: a forkserver must have
    none (a fork copies no other thread, and a lock one of them held stays locked)."""
    return [t.name for t in threading.enumerate() if t is not threading.main_thread()]


def load_airflow_plugins() -> bool:
    """Load Airflow's plugins (this provider's among them) as a task process would: a
    scheduler-forked worker inherits them loaded, a forkserver's must load them here, or
    every task loads them again (0.9 s measured here). Storage and Spark are not touched."""
    try:
        from airflow.sdk.listener import get_listener_manager
        from airflow.sdk.plugins_manager import integrate_macros_plugins
    except ImportError:
        return False
    try:
        integrate_macros_plugins()
        get_listener_manager()
    except Exception as exc:  # noqa: BLE001 - a task loads them itself then
        log.warning("preload: Airflow plugins not loaded (%s: %s)", type(exc).__name__, exc)
        return False
    return True


#: A job's own heavy modules, for executors whose preload is this module alone (Celery):
#: ``CKPT_PRELOAD_MODULES`` (comma-separated module names).
EXTRA_MODULES = tuple(m.strip() for m in os.environ.get("CKPT_PRELOAD_MODULES", "").split(",")
                      if m.strip())
IMPORTED = preload(MODULES + EXTRA_MODULES)
PLUGINS_LOADED = load_airflow_plugins()


def __getattr__(name: str) -> Any:
    """``CELERY_CONFIG``, for CeleryExecutor: ``[celery] celery_config_options =
    dag_checkpoints.task.preload.CELERY_CONFIG`` is Celery's default configuration, read by
    ``airflow celery worker`` before its prefork pool forks, so that the pool's processes
    (and the task processes they fork) inherit the modules above. Resolved on first use:
    importing Celery's defaults has effects (a log line) a LocalExecutor deployment needs
    not."""
    if name == "CELERY_CONFIG":
        from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

        return DEFAULT_CELERY_CONFIG
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

