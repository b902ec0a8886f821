"""The forkserver's preloaded imports."""

from __future__ import annotations


def _child_modules(q):  # runs in a process the forkserver forked
    import sys

    q.put(sorted(m for m in ("pyspark.sql.connect.session", "great_expectations",
                             "spark_jobs.runtime", "airflow.sdk.execution_time.task_runner")
                 if m in sys.modules))


def test_forkserver_preload_hands_the_imports_to_forked_processes():
    """What `[scheduler] mp_start_method = forkserver` with `mp_forkserver_preload =
    dag_checkpoints.task.preload,great_expectations` does for LocalExecutor's workers: a process
    forked by that server starts with the task's heavy modules imported; the preload module
    itself leaves no thread running (a fork would copy none of them)."""
    import subprocess
    import sys

    from bench.harness.airflow_env import PRELOAD_ENV, ROOT

    ctx = __import__("multiprocessing").get_context("forkserver")
    modules = PRELOAD_ENV["AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD"].split(",")
    ctx.set_forkserver_preload(modules)
    q = ctx.Queue()
    p = ctx.Process(target=_child_modules, args=(q,))
    p.start()
    got = q.get(timeout=120)
    p.join(30)
    assert got == ["airflow.sdk.execution_time.task_runner", "great_expectations",
                   "pyspark.sql.connect.session", "spark_jobs.runtime"]
    # In an interpreter of its own (this one has threads of its own): no thread besides the
    # main one after the import, and a module that fails to import is skipped, not fatal.
    r = subprocess.run([sys.executable, "-c",
                        "from dag_checkpoints.task import preload as p; "
                        "print('RESULT', p.extra_threads(), "
                        "p.preload(('no_such_module_x', 'json')), "
                        "'pyspark.sql.connect.session' in p.IMPORTED, p.PLUGINS_LOADED)"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    # Airflow's plugin loading logs to stdout: the last line is the answer
    assert r.stdout.splitlines()[-1].split() == ["RESULT", "[]", "['json']", "True", "True"]
