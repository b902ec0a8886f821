"""How a job writes its state in one attempt: Spark writes into the attempt's own area
(never where an earlier attempt's partial files could be read), the snapshot then adds
the files by reference or key; partitions unchanged since the parent epoch are carried
without a copy. In connect mode each write is an operation a retry can resume. Part of
:class:`~spark_jobs.runtime.JobRun`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

from checkpointing.protocol.state_handle import FileRef, StateHandle

from .connect import is_connect
from .reattach import new_operation, operation_id, reattach
from .run_inputs import RunInputs
from .session import spark_uri

log = logging.getLogger("spark_jobs.runtime")
T = TypeVar("T")


#: the column a partitioned state write partitions by (a copy of the job's column)
_PART = "part"
#: the directory Spark writes a null partition value to
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


class RunState(RunInputs):
    """A job run's state writes (JobRun's fields: operations, epoch_id, task_id, attempt,
    spark, previous, writer, scratch, storage, resume, resumed, snapshot_write_ms)."""

    @property
    def distributed(self) -> bool:
        """Whether Spark must write through storage: executors on other hosts, or a Spark
        Connect server's, cannot write into this process's scratch directory. True for
        object-store checkpoints and for Spark Connect sessions."""
        return is_connect(self.spark) or not self.storage.local

    def _target(self, sub: str, kind: Literal["state", "staging"], attempt: int | None = None
                ) -> tuple[str, str | None]:
        """(Spark path, storage key prefix or None) of an attempt-scoped write target (this
        attempt's, or ``attempt``'s when resuming its operation)."""
        if not self.distributed:
            return str(self.scratch / sub), None
        uri, prefix = self.storage.area(kind, f"spark/{sub}", attempt)
        return spark_uri(uri), prefix

    def _spark_write(self, action: str, df: Any, target: Callable[[int], Any],
                     write: Callable[[Any, Any], None]) -> Any:
        """Run one write ``action`` (``<kind>:<name>``) of ``df`` into ``target(attempt)``
        and return that target. In connect mode the action is recorded before it starts
        (PROTOCOL 5.17); a retry whose killed predecessor was running this very action
        waits for that operation instead and returns the predecessor's target."""
        with self._snapshot_write():
            op = self.resume
            if op is not None and op.action == action and is_connect(self.spark) \
                    and not self.resumed:
                why = reattach(self.spark, op, df)
                if why is None:
                    log.info("task %s attempt %d resumed %s from attempt %d's operation "
                             "instead of running it again", self.task_id, self.attempt,
                             action, op.attempt)
                    self.resumed.append(action)
                    return target(op.attempt)
                log.info("task %s attempt %d could not resume %s of attempt %d (%s): "
                         "running it again", self.task_id, self.attempt, action, op.attempt,
                         why)
            t = target(self.attempt)
            if not is_connect(self.spark):
                write(df, t)
                return t
            rec = new_operation(self.spark, self.task_id, self.attempt, action, df, time.time())
            self.operations.record_operation(self.epoch_id, rec)
            with operation_id(self.spark, rec.operation_id):
                write(df, t)
            return t

    @contextlib.contextmanager
    def _snapshot_write(self) -> Iterator[None]:
        """Time a Spark write into ``snapshot_write_ms``: wall time while at least one
        write runs, so that writes running at once are counted once."""
        with self._write_lock:
            self._writes_running += 1
            if self._writes_running == 1:
                self._writes_since = time.monotonic()
        try:
            yield
        finally:
            with self._write_lock:
                self._writes_running -= 1
                if self._writes_running == 0:
                    self.snapshot_write_ms += (time.monotonic() - self._writes_since) * 1000

    def concurrently(self, *actions: Callable[[], T]) -> list[T]:
        """Run independent ``actions`` (each a write of state or an output, each its own
        Spark job) at once, and return their results in order; the first failure is raised
        once all have ended. On two cores a small write leaves most of them idle while
        Spark plans it, lists files and commits; another write fills them. Each action
        runs in a thread of its own carrying this attempt's Spark job tags (an interrupt of
        the attempt reaches it) and its record of cached DataFrames."""
        import contextvars
        from concurrent.futures import ThreadPoolExecutor

        if len(actions) < 2:
            return [a() for a in actions]
        tags = set(self.spark.getTags())

        def tagged(action: Callable[[], T]) -> T:
            for t in tags:
                self.spark.addTag(t)
            try:
                return action()
            finally:
                for t in tags:
                    self.spark.removeTag(t)

        with ThreadPoolExecutor(len(actions), thread_name_prefix=f"{self.task_id}-write") as ex:
            futures = [ex.submit(contextvars.copy_context().run, tagged, a) for a in actions]
            errors = [f.exception() for f in futures]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return [f.result() for f in futures]

    def write_state(self, df: Any, name: str, partition_col: str | None = None,
                    options: dict[str, str] | None = None,
                    sort_by: tuple[str, ...] = ()) -> list[FileRef]:
        """Write ``df`` as state files ``name/...`` into an attempt-scoped location, then
        snapshot: files identical to the previous epoch's are referenced, not kept twice.
        ``options`` are Spark's Parquet writer options (row group size, bloom filters,
        dictionary encoding per column: ``parquet.bloom.filter.enabled#<col>``).
        ``sort_by``: each file's rows in this order (row-group statistics then skip by
        those columns). A sort of ``df`` itself does not survive a partitioned write:
        Spark's writer sorts by the partition and drops a sort beneath it."""
        from pyspark.sql import functions as F

        if partition_col:
            # partitionBy drops its column from the files, and state is read back by file,
            # not by directory: partition by a copy so the column stays in the data.
            part = F.col(partition_col).cast("string")
            if sort_by:
                # Spark's writer maps a nullable string partition's "" to null and sorts
                # again by that, replacing the sort below; a column that is never null (the
                # directory a null gets anyway) keeps it.
                part = F.coalesce(F.nullif(part, F.lit("")), F.lit(_NULL_PARTITION))
            df = df.withColumn(_PART, part)
        if sort_by:
            df = df.sortWithinPartitions(*([_PART] if partition_col else []), *sort_by)
        parts = [_PART] if partition_col else []
        path, prefix = self._spark_write(
            f"state:{name}", df, lambda a: self._target(name, "state", a),
            lambda d, t: d.write.mode("overwrite").options(**(options or {}))
            .partitionBy(*parts).parquet(t[0]))
        if prefix is None:
            return self.writer.add_directory(path, prefix=f"{name}/")
        return [self.writer.add_stored(f"{name}/{k[len(prefix):]}", k)
                for k in self.storage.stored(prefix)]

    def carry_partitions(self, name: str, keep: set[str]) -> int:
        """Reference the previous epoch's files of ``name`` whose partition value is in
        ``keep`` (unchanged partitions); returns the bytes carried without copying."""
        carried = 0
        for ref in self.files(self.previous, f"{name}/"):
            part = partition_value(ref.name)
            if part is not None and part in keep:
                self.writer.reference(ref)
                carried += ref.size
        return carried

    def partitions(self, handle: StateHandle | None, name: str) -> set[str]:
        return {p for f in self.files(handle, f"{name}/")
                if (p := partition_value(f.name)) is not None}


def partition_value(name: str) -> str | None:
    """The partition value in a state file's logical name (``bronze/part=<v>/...``)."""
    for seg in name.split("/"):
        if seg.startswith(f"{_PART}="):
            return seg[len(_PART) + 1:]
    return None
