"""What `make install` leaves behind besides the packages: their bytecode. uv, which
installs them, compiles none; without it every process compiles each module it imports
(`import airflow` 5.3 CPU-s instead of 2.2), every time where writing bytecode is off."""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: what every Airflow process, Spark driver, task and test worker imports, the project's
#: own entry points among them
EVERY_PROCESS_IMPORTS = (
    "airflow", "airflow.models.dag", "airflow.sdk.execution_time.task_runner",
    "sqlalchemy.orm", "pydantic.main", "pandas.core.frame", "pyarrow",
    "pyspark.sql.dataframe", "pyspark.sql.connect.session", "deltalake", "sqlglot.parser",
    "checkpointing.coordination.coordinator", "dag_checkpoints.operators.spark",
    "spark_jobs.runtime.job_run",
)


def test_the_modules_every_process_imports_are_compiled():
    missing = []
    for name in EVERY_PROCESS_IMPORTS:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, name
        if not Path(importlib.util.cache_from_source(spec.origin)).exists():
            missing.append(name)
    assert not missing, f"no bytecode for {missing}: run `make install`"
