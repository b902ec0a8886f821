"""The runtime's entry point: one task attempt of any job under the checkpoint contract,
from a command line. A user's application file for spark-submit is two lines::

    from spark_jobs.runtime import main
    from my_pkg.jobs import sessionize
    raise SystemExit(main(sessionize))

and is submitted as ``spark-submit my_job.py --storage URI --pipeline ID --data URI
--epoch N --task T --attempt K``. Without an application file of one's own:
``python -m spark_jobs.runtime --job my_pkg.jobs:sessionize --storage ...`` (or the same
arguments to ``spark_jobs/runtime/submit.py`` under spark-submit).

Exit codes: 0 acknowledged (one JSON line on stdout), 3 the job declined the epoch, 2 any
other checkpoint error (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from checkpointing import Coordinator, open_storage
from checkpointing.errors import CheckpointError

from .connect import SparkConnectError
from .errors import DeclineEpoch, JobResultError
from .job_run import run_task
from .reference import JobReferenceError, job_reference, resolve_job
from .session import spark_session

EXIT_DECLINED = 3


def _parser(prog: str, with_job: bool) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Run one task attempt of a job "
                                 "under the checkpoint contract (restore, run, snapshot, ack).")
    if with_job:
        ap.add_argument("--job", required=True, help="package.module:function")
    ap.add_argument("--storage", required=True, help="checkpoint storage URI")
    ap.add_argument("--pipeline", required=True, help="pipeline id (the DAG id)")
    ap.add_argument("--data", default="", help="data root URI the job reads (JobRun.data)")
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--task", help="task id in the epoch's plan (default: the job's name)")
    ap.add_argument("--attempt", type=int, default=1)
    ap.add_argument("--endpoint-url", help="S3-compatible endpoint")
    ap.add_argument("--master", help="default: spark-submit's, else local[2]")
    ap.add_argument("--remote", help="a Spark Connect server (sc://host:port) instead of a "
                    "Spark of this process")
    return ap


def main(job: Callable[..., Any] | str | None = None, argv: list[str] | None = None) -> int:
    """Run one attempt of ``job`` (or of ``--job``) as the arguments say; returns the exit
    code."""
    argv = sys.argv[1:] if argv is None else argv
    a = _parser("spark_jobs.runtime" if job is None else job_reference(job),
                with_job=job is None).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        fn = resolve_job(job if job is not None else a.job)
        task = a.task or job_reference(fn).rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        coord = Coordinator(open_storage(a.storage, endpoint_url=a.endpoint_url), a.pipeline)
        spark = spark_session(f"{a.pipeline}.{task}", a.master,
                              s3=a.data.startswith("s3") or a.storage.startswith("s3"),
                              endpoint_url=a.endpoint_url, remote=a.remote)
        ack = run_task(fn, coord, a.epoch, task, a.attempt, spark, a.data,
                       endpoint_url=a.endpoint_url)
    except DeclineEpoch as exc:
        print(f"{a.task or 'job'}: declined epoch {a.epoch}: {exc}", file=sys.stderr)
        return EXIT_DECLINED
    except (CheckpointError, JobReferenceError, JobResultError, SparkConnectError) as exc:
        print(f"{a.task or 'job'}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"task": task, "epoch": a.epoch, "attempt": ack.attempt,
                      "row_counts": ack.state_handle.row_counts}))
    return 0
