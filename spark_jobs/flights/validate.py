"""validate: a Great Expectations (GX Core 1.x) suite over the epoch's outputs and the state
invariants. A failure declines the epoch: nothing is published and the abort path (alerts)
fires.

Checks: non-null keys and plausible delay ranges in the gold tables; per key, cancelled and
delay counts never above flights; and row counts consistent with inputs minus quarantine:
every row read is added, dropped as a duplicate or quarantined, and the route statistics
count exactly the flights in the source's state (the source's running ``state_rows``).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pandas as pd

from ..runtime import DeclineEpoch, JobResult, JobRun
from .ingest_flights import BRONZE_SCHEMA
from .stats import state_schema

log = logging.getLogger("spark_jobs.flights.validate")


def _suite(name: str, keys: list[str]):
    import great_expectations as gx

    ex: Any = gx.expectations  # its classes are exported lazily, unseen by mypy
    suite = gx.ExpectationSuite(name=name)
    for k in keys:
        suite.add_expectation(ex.ExpectColumnValuesToNotBeNull(column=k))
    suite.add_expectation(ex.ExpectCompoundColumnsToBeUnique(column_list=keys)
                          if len(keys) > 1 else ex.ExpectColumnValuesToBeUnique(column=keys[0]))
    for col in ("avg_dep_delay", "avg_arr_delay"):
        suite.add_expectation(ex.ExpectColumnValuesToBeBetween(
            column=col, min_value=-120, max_value=600, mostly=1.0))
    suite.add_expectation(ex.ExpectColumnValuesToBeBetween(column="flights", min_value=1))
    for col in ("cancelled", "dep_delay_n", "arr_delay_n"):
        suite.add_expectation(ex.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="flights", column_B=col, or_equal=True))
    return suite


def run_suite(frames: dict[str, tuple[pd.DataFrame, list[str]]]) -> list[str]:
    """Validate each gold frame; return one line per failed expectation."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = gx.get_context(mode="ephemeral")
        # GX draws tqdm progress bars into task logs by default: noise in Airflow's log view.
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        ds = ctx.data_sources.add_pandas("gold")
        for name, (df, keys) in frames.items():
            bd = ds.add_dataframe_asset(name).add_batch_definition_whole_dataframe("epoch")
            res = bd.get_batch(batch_parameters={"dataframe": df}).validate(_suite(name, keys))
            for r in res.results:
                if not r.success:
                    cfg = r.expectation_config
                    failures.append(f"{name}: {cfg.type} {dict(cfg.kwargs)} "
                                    f"unexpected={r.result.get('unexpected_count')}")
    return failures


def validate(run: JobRun) -> JobResult:
    frames = {}
    for task, keys, output in (("route_stats", ["origin", "dest"], "gold_route_stats"),
                               ("carrier_stats", ["carrier"], "gold_carrier_stats")):
        refs = run.files(run.upstream[task], "", outputs=output)
        frames[output] = (run.read_parquet(refs, state_schema(keys)).toPandas(), keys)
    failures = run_suite(frames)

    ingest = run.upstream["ingest_flights"]
    rc = ingest.row_counts
    if rc["rows_read"] != rc["rows_added"] + rc["duplicates_dropped"] + rc["rows_quarantined"]:
        failures.append(f"ingest_flights row counts inconsistent: {rc}")
    # The source's running count of its state: reading the whole bronze history here would
    # make this task, and every retry of it, grow with the history.
    bronze_rows = rc.get("state_rows")
    if bronze_rows is None:
        bronze_rows = run.read_parquet(run.files(ingest, "bronze/"), BRONZE_SCHEMA).count()
    for output, (df, _) in frames.items():
        if int(df["flights"].sum()) != bronze_rows:
            failures.append(f"{output}: counts {int(df['flights'].sum())} flights, the source "
                            f"state holds {bronze_rows}")
    if failures:
        log.error("validation failed: %s", "; ".join(failures))
        raise DeclineEpoch(f"validation failed ({len(failures)}): {failures[0]}")
    return JobResult(row_counts={"bronze_rows": bronze_rows},
                     metrics={"expectations_failed": 0, "tables": sorted(frames)})
