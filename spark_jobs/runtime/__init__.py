"""The job runtime: the contract every checkpointed Spark job follows, for any pipeline.

A job is a function ``job(run: JobRun) -> JobResult``. The runtime registers the attempt
(fencing older ones), restores the task's state of the parent epoch and this epoch's
upstream handles, runs the job, snapshots the files it wrote (unchanged ones by reference)
and acknowledges; a job that finds its input unacceptable raises :class:`DeclineEpoch`.
Jobs are referenced as ``"package.module:function"`` and run in-process (:func:`run_task`)
on a local session or a Spark Connect server's (``spark_session(remote=...)``), under
spark-submit (:func:`main` in an application file, or ``spark_jobs/runtime/submit.py
--job ...``) or from the shell (``python -m spark_jobs.runtime --job ...``).
"""

from .connect import SparkConnectError, connect_session, is_connect
from .driver import Pipeline, drive_epoch
from .entry import EXIT_DECLINED, main
from .errors import ConnectUnsupported, DeclineEpoch, JobResultError
from .file_source import NewInput, new_input
from .job_run import Job, JobResult, JobRun, interrupt_attempt, job_tag, run_task
from .observed import observed
from .package import build_jobs_zip
from .published import read_published
from .reference import JobReferenceError, job_reference, named_job, resolve_job
from .run_state import partition_value
from .session import spark_session, spark_uri
from .spark_conf import s3a_conf

from checkpointing.protocol.table_inputs import TableInput  # isort: skip - re-exported for jobs
from checkpointing.tables.spec import TableSpec  # isort: skip - re-exported for jobs
from .table_source import TableChanges  # isort: skip

__all__ = ["EXIT_DECLINED", "ConnectUnsupported", "DeclineEpoch", "SparkConnectError",
           "connect_session", "is_connect", "Job", "JobReferenceError", "JobResult",
           "JobResultError", "JobRun",
           "NewInput", "Pipeline", "TableChanges", "TableInput", "build_jobs_zip",
           "drive_epoch", "interrupt_attempt",
           "job_reference", "job_tag",
           "main", "named_job",
           "new_input", "observed", "partition_value", "read_published", "resolve_job", "run_task",
           "s3a_conf", "spark_session", "spark_uri", "TableSpec"]
