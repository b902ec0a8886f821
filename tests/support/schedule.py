"""The order `make test` hands modules to xdist (``-n 3 --dist loadfile
--no-loadscope-reorder``), chosen by simulating xdist's scheduler.

Longest-first alone is not enough: xdist's load-file scheduler gives a worker its next
module while it still runs the current one (it tops a worker up whenever two tests or
fewer are pending on it), so a module queued behind a ten-minute one waits, while the other
workers run dry. The simulation models exactly that rule, starts from longest-first and
moves modules while the simulated end of the last worker gets earlier.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds of each slow module under `make test` (setup + calls, measured with
#: CKPT_TEST_CPU_LOG on 2 cores, three workers). Other modules count DEFAULT_SECONDS.
MODULE_SECONDS = {
    "test_spark_jobs.py": 460, "test_airflow_standalone.py": 425, "test_faults.py": 410,
    "test_topology.py": 335, "test_spark_lakehouse.py": 330, "test_faults_data.py": 280,
    "test_airflow_failure_paths.py": 290, "test_aircraft_dag.py": 200,
    "test_spark_connect.py": 250, "test_spark_cluster.py": 280, "test_airflow_dags.py": 220,
    "test_tpch.py": 320, "test_spark_s3.py": 200, "test_airflow_timeout.py": 190,
    "test_expected_input.py": 175, "test_otel_metrics.py": 165, "test_airflow_cli.py": 145,
    "test_readme_commands.py": 135, "test_user_pipeline.py": 135, "test_demo.py": 65,
    "test_table_inputs.py": 95, "test_delta_histories.py": 400,
    "test_metastore_first_session.py": 40,
    "test_airflow_staleness.py": 95, "test_tables.py": 85,
    "test_lineage.py": 60, "test_iceberg_tables.py": 55, "test_cli_on_s3.py": 55,
    "test_bench.py": 500, "test_coordinator_on_s3.py": 28, "test_lease.py": 25,
    "test_cli.py": 20, "test_state_on_s3.py": 15, "test_epoch_deadline.py": 12,
    "test_iceberg_spark_histories.py": 250, "test_ivm_spark.py": 250,
    "test_view_tasks.py": 450, "test_view_files.py": 150,
    "test_ivm_histories.py": 100, "test_ivm_tpch.py": 60,
}
DEFAULT_SECONDS = 10.0
#: xdist's LoadScopeScheduling._reschedule: a worker is given another module when this many
#: of its tests or fewer are still pending.
TOP_UP_AT = 2


@dataclass
class _Worker:
    pending: list[float]  # seconds of each test not finished, running one first
    clock: float = 0.0


def makespan(order: list[str], tests: dict[str, int], workers: int) -> float:
    """The simulated time at which the last worker finishes, modules handed out in
    ``order`` by xdist's rule."""
    queue = list(order)
    ws = [_Worker([]) for _ in range(workers)]

    def give(w: _Worker) -> None:
        if queue:
            m = queue.pop(0)
            n = max(tests.get(m, 1), 1)
            w.pending += [MODULE_SECONDS.get(m, DEFAULT_SECONDS) / n] * n

    for w in ws:  # schedule(): one module each, then one top-up each
        give(w)
    for w in ws:
        if len(w.pending) <= TOP_UP_AT:
            give(w)
    while any(w.pending for w in ws):
        w = min((w for w in ws if w.pending), key=lambda w: w.clock + w.pending[0])
        w.clock += w.pending.pop(0)
        if len(w.pending) <= TOP_UP_AT:  # mark_test_complete -> _reschedule
            give(w)
    return max(w.clock for w in ws)


def balanced_order(tests: dict[str, int], workers: int) -> list[str]:
    """Module names in the order to collect them: longest first, then each move of one
    module to another place kept while it shortens the simulated makespan."""
    order = sorted(tests, key=lambda m: (-MODULE_SECONDS.get(m, DEFAULT_SECONDS), m))
    if workers < 2:
        return order
    best = makespan(order, tests, workers)
    improved = True
    while improved:
        improved = False
        for i in range(len(order)):
            for j in range(len(order)):
                if i == j:
                    continue
                cand = order[:i] + order[i + 1:]
                cand.insert(j, order[i])
                span = makespan(cand, tests, workers)
                if span < best - 1e-6:
                    order, best, improved = cand, span, True
                    break
            if improved:
                break
    return order
