"""The contract every job follows, through the checkpointing library:

1. register the attempt (fencing); if the task already acknowledged the epoch, do nothing;
2. restore: the task's state handle of the parent epoch, and its upstream tasks' handles of
   *this* epoch (aligned barrier: never another epoch's inputs);
3. run: read only new input, merge it into the restored state, write into an
   attempt-scoped scratch directory, so that a killed attempt's partial files are never read;
4. snapshot (changed files only) and acknowledge with the state handle.

A job that finds its epoch's data unacceptable raises :class:`DeclineEpoch`.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpointing import (
    Acknowledgement,
    Coordinator,
    EngineOperation,
    SnapshotWriter,
    StateHandle,
)
from checkpointing.documents import now_iso
from checkpointing.errors import EpochAlreadyDecided
from checkpointing.state_handle import FileRef
from checkpointing.storage import LocalStorage, Storage, open_storage
from checkpointing.table_inputs import TableInputError, TableVersion
from checkpointing.tables import TableSpec
from checkpointing.task_storage import TaskStorage

from .connect import SparkConnectError, is_connect, unsupported_feature
from .file_source import MAX_FILE_AGE_SECONDS, NewInput, SeenIndex, new_input
from .reattach import new_operation, operation_id, reattach, release_session
from .session import spark_uri
from .spark_conf import OUTPUT_FILES_CONF
from .table_source import TableChanges

_RUN_UNTIL = object()  # new_input's default: the epoch's data interval end
#: where a task's index of consumed files is kept in its state
SEEN_FILES = "seen_files/"

log = logging.getLogger("spark_jobs.runtime")


class DeclineEpoch(Exception):
    """Raised by a job to decline its epoch (bad data, failed validation)."""


class ConnectUnsupported(SparkConnectError):
    """A job used a feature Spark Connect does not have (sparkContext, RDDs, the JVM)."""


@dataclass
class JobResult:
    offsets: Any = None
    row_counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobRun:
    """Everything a job needs for one attempt of one task in one epoch."""

    coordinator: Coordinator
    epoch_id: int
    task_id: str
    attempt: int
    spark: Any  # pyspark.sql.SparkSession
    data: Storage | None  # the data root the job reads; None when the run gave none
    previous: StateHandle | None
    upstream: dict[str, StateHandle]
    writer: SnapshotWriter
    scratch: Path
    #: the attempt's view of checkpoint storage (its state and staging areas)
    storage: TaskStorage
    #: milliseconds Spark spent writing the snapshot's state and staged outputs: the
    #: ``sync_ms`` of the handle's timings (the job waits for it, as Flink's synchronous
    #: part); making them durable afterwards is the writer's ``async_ms``
    snapshot_write_ms: float = 0.0
    #: the operation a killed earlier attempt left running (connect mode), which this
    #: attempt resumes when its job reaches the same action (PROTOCOL 6.3)
    resume: EngineOperation | None = None
    #: actions this attempt took over from the earlier attempt's operation
    resumed: list[str] = field(default_factory=list)
    #: per table input, the version the state has consumed (carried from the parent's
    #: handle, advanced by :meth:`table_changes`): the handle's ``table_offsets``
    table_offsets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: what each table input read this attempt (the handle's ``metrics.table_inputs``)
    table_reads: dict[str, dict[str, Any]] = field(default_factory=dict)

    # ------------------------------------------------------------------ reading
    @property
    def input_until(self) -> str | None:
        """The day (ISO date) at which this epoch's input stops, from the barrier's data
        interval end; None when the epoch has no interval (consume everything new)."""
        interval = self.coordinator.barrier(self.epoch_id).data_interval or {}
        end = interval.get("end")
        return str(end)[:10] if end else None

    def files(self, handle: StateHandle | None, prefix: str,
              outputs: str | None = None) -> list[FileRef]:
        """Parquet files of ``handle`` whose logical name starts with ``prefix`` (or the
        files of output ``outputs``)."""
        if handle is None:
            return []
        if outputs is not None:
            out = handle.outputs.get(outputs)
            return list(out.files) if out else []
        return [f for f in handle.files if f.name.startswith(prefix)
                and f.name.endswith(".parquet")]

    def new_input(self, prefix: str, *, until: str | None | object = _RUN_UNTIL,
                  suffix: str = ".csv",
                  max_age_seconds: float = MAX_FILE_AGE_SECONDS) -> NewInput:
        """The files landed under ``prefix`` of the data root that no earlier epoch of
        this task consumed, up to the epoch's input end (``until``: default the data
        interval's end; None: everything landed). ``.new`` are the keys to read;
        ``.replaced`` those of them that rewrite a file consumed before, *whatever its
        age* (a correction: retract what the old content contributed); ``.late`` new keys
        named for a day already consumed. Return ``.offsets`` in the JobResult.

        The task keeps a :class:`~spark_jobs.runtime.file_source.SeenIndex` of every file
        it consumed in its state (``seen_files/<month>.json``): only the months of the
        files it consumes are read and rewritten, the others carried by reference."""
        stored = {f.name.removeprefix(SEEN_FILES).removesuffix(".json"): f
                  for f in (self.previous.files if self.previous else ())
                  if f.name.startswith(SEEN_FILES)}
        def load(bucket: str) -> dict[str, str] | None:
            ref = stored.get(bucket)
            if ref is None:
                return None
            return SeenIndex.parse(self.storage.read(ref))

        if self.data is None:
            raise ValueError("new_input needs the run's data root (--data / CKPT_DATA)")
        index = SeenIndex(load, suffix)
        found = new_input(self.data, prefix,
                          self.previous.offsets if self.previous else None,
                          until=self.input_until if until is _RUN_UNTIL else until,
                          max_age_seconds=max_age_seconds, suffix=suffix, index=index)
        for bucket, ref in stored.items():
            if bucket not in index.changed:
                self.writer.reference(ref)
        for bucket, body in index.documents().items():
            path = self.scratch / f"seen-{bucket}.json"
            path.write_bytes(body)
            self.writer.add_file(f"{SEEN_FILES}{bucket}.json", path)
        return found

    def table_changes(self, name: str) -> TableChanges:
        """The rows upstream table input ``name`` (declared on the task: ``table_inputs=``
        of the operator or decorator) added and removed since the version this task's
        parent epoch consumed, up to the version the epoch's barrier pinned (PROTOCOL
        6.14): ``.added`` and ``.removed`` DataFrames (``.signed()`` both with a +1/-1
        column), ``.start``/``.end`` the version range. The first epoch (no parent state
        of the input) reads the table's whole content at the pinned version. Every attempt
        of the epoch reads the same change; the consumed version is recorded in the
        task's state handle (``table_offsets``) when it acknowledges. A change that cannot
        be read (an incompatible schema change, a version the table's VACUUM or log
        retention removed, deletion vectors) declines the epoch with one line."""
        from .table_source import read_changes

        barrier = self.coordinator.barrier(self.epoch_id)
        spec = barrier.plan[self.task_id].table_inputs.get(name) \
            if self.task_id in barrier.plan else None
        end = barrier.table_version(name)
        if spec is None or end is None:
            declared = sorted(barrier.plan[self.task_id].table_inputs) \
                if self.task_id in barrier.plan else []
            raise ValueError(f"task {self.task_id!r} has no table input {name!r} in its "
                             f"epoch's plan (declared: {declared or 'none'}); declare it "
                             "with table_inputs={...} on the task")
        prev = self.table_offsets.get(name)
        start = TableVersion.from_json(prev) if prev is not None else None
        try:
            found = read_changes(self.spark, name, spec, start, end,
                                 self.storage.endpoint_url)
        except TableInputError as exc:
            raise DeclineEpoch(str(exc)) from None
        self.table_offsets[name] = end.to_json()
        self.table_reads[name] = found.metrics()
        log.info("task %s reads table input %s: versions %s..%s, %d file(s) added, %d "
                 "removed", self.task_id, name, "start" if start is None else start.version,
                 end.version, len(found.change_set.added), len(found.change_set.removed))
        return found

    def read_table(self, handle: StateHandle | None, output: str):
        """The rows of table output ``output`` as ``handle`` (e.g. an upstream task's of
        this epoch) lists them: for ``overwrite`` and ``replace_partitions``, the table's
        whole content after that epoch, partition columns included; for ``append``, the
        rows that epoch added. An empty frame of the table's schema when it has no file."""
        from .published import table_frame

        out = handle.outputs.get(output) if handle else None
        if out is None or "table" not in out.meta:
            raise ValueError(f"no table output {output!r} in that state handle")
        return table_frame(self.spark, [f.uri for f in out.files],
                           TableSpec.from_json(out.meta["table"]), out.meta["schema"])

    def read_parquet(self, refs: list[FileRef], schema: Any):
        """A DataFrame over stored parquet files (empty with ``schema`` when none)."""
        if not refs:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).parquet(*[spark_uri(r.uri) for r in refs])

    # ------------------------------------------------------------------ writing
    @property
    def distributed(self) -> bool:
        """Whether Spark must write through storage: executors on other hosts, or a Spark
        Connect server's, cannot write into this process's scratch directory. True for
        object-store checkpoints and for Spark Connect sessions."""
        return is_connect(self.spark) or not self.storage.local

    def _target(self, sub: str, kind: str, attempt: int | None = None
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
            self.coordinator.record_operation(self.epoch_id, rec)
            with operation_id(self.spark, rec.operation_id):
                write(df, t)
            return t

    def write_state(self, df: Any, name: str, partition_col: str | None = None) -> list[FileRef]:
        """Write ``df`` as state files ``name/...`` into an attempt-scoped location, then
        snapshot: files identical to the previous epoch's are referenced, not kept twice."""
        if partition_col:
            # partitionBy drops its column from the files, and state is read back by file,
            # not by directory: partition by a copy so the column stays in the data.
            from pyspark.sql import functions as F

            df = df.withColumn(_PART, F.col(partition_col).cast("string"))
        parts = [_PART] if partition_col else []
        path, prefix = self._spark_write(
            f"state:{name}", df, lambda a: self._target(name, "state", a),
            lambda d, t: d.write.mode("overwrite").partitionBy(*parts).parquet(t[0]))
        if prefix is None:
            return self.writer.add_directory(path, prefix=f"{name}/")
        return [self.writer.add_stored(f"{name}/{k[len(prefix):]}", k)
                for k in self.storage.stored(prefix)]

    def write_output(self, df: Any, output: str, rows: int | None = None) -> int:
        """Stage ``df`` as output ``output`` (published only when the epoch completes).
        Returns its row count: ``rows`` when given, else counted by the write itself."""
        files = self.spark.conf.get(OUTPUT_FILES_CONF, None)
        df, counted = _counting(df, rows)
        if files:
            df = df.coalesce(int(files))
        path, prefix = self._spark_write(
            f"output:{output}", df, lambda a: self._target(f"out-{output}", "staging", a),
            lambda d, t: d.write.mode("overwrite").parquet(t[0]))
        rows = counted()
        if prefix is None:
            parts = sorted(p for p in Path(path).iterdir() if p.suffix == ".parquet")
            self.writer.stage_output(output, parts, rows=rows)
        else:
            self.writer.stage_stored_output(output, self.storage.stored(prefix), rows=rows)
        return rows

    def write_table(self, df: Any, output: str, spec: TableSpec, rows: int | None = None,
                    replaced: Any = (), deleted: Any = None) -> int:
        """Stage ``df`` as table output ``output`` (PROTOCOL 6.12): Spark writes Parquet
        straight into the table's location, in a directory of this attempt that the table's
        log does not reference; the epoch's completion commits it as one table version
        (Delta: ``txn(appId, epoch)``), exactly once. Partition columns (``spec``'s
        ``partition_by``) are written as directories; string, integer, boolean and date
        columns keep their type, others become strings.

        ``overwrite``: ``df`` is the table's whole content after the epoch.
        ``replace_partitions``: ``df`` holds the partitions the epoch changed, in full; the
        previous epoch's files of the other partitions stay (by reference, not rewritten).
        ``replaced`` names partitions the epoch recomputed and found empty (values, or
        value tuples for several partition columns): removed from the table.
        ``append``: ``df`` holds the rows the epoch adds.
        ``merge``: ``df`` holds the rows the epoch inserts or updates, one per key
        (``spec.keys``), and ``deleted`` (a DataFrame with the key columns) the keys it
        deletes; the commit merges them by key (Delta: a MERGE commit; Iceberg: an
        overwrite snapshot deleting the changed keys' rows and adding the new ones).

        Returns the rows written: ``rows`` when given, else counted by the write itself
        (no separate Spark job)."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        from checkpointing.formats import traits
        from checkpointing.storage import open_storage
        from checkpointing.tables import DELETE_COLUMN

        if spec.mode == "merge":
            # Staged as one set of change rows, unpartitioned: the commit's merge writes
            # the table's files (and partitions) itself.
            df = df.withColumn(DELETE_COLUMN, F.lit(False))
            if deleted is not None:
                df = df.unionByName(deleted.select(*spec.keys).withColumn(
                    DELETE_COLUMN, F.lit(True)), allowMissingColumns=True)
        elif deleted is not None:
            raise ValueError(f"deleted= needs mode merge, not {spec.mode!r}")
        df, counted = _counting(df, rows)
        dirs = [] if spec.mode == "merge" else list(spec.partition_by)
        if traits(spec.format).partition_columns_in_files and dirs:
            # Iceberg reads partition values from the files' statistics: the files keep
            # the columns, and directories of copies group them (one value per file).
            dirs = [spec.partition_dir_prefix + c for c in spec.partition_by]
            for col, d in zip(spec.partition_by, dirs, strict=True):
                df = df.withColumn(d, F.col(col).cast("string"))
        else:
            for col in dirs:
                # Spark writes these types' partition directories as Delta serialises
                # their partition values; any other type is published as a string column.
                if df.schema[col].dataType.typeName() not in _PARTITION_TYPES:
                    df = df.withColumn(col, F.col(col).cast("string"))
        files = self.spark.conf.get(OUTPUT_FILES_CONF, None)
        if files:
            df = df.coalesce(int(files))
        schema = to_arrow_schema(df.drop(DELETE_COLUMN, *[d for d in dirs
                                                          if d not in spec.partition_by])
                                 .schema)
        store = open_storage(spec.location, endpoint_url=self.storage.endpoint_url)
        local = not self.distributed and isinstance(store, LocalStorage)
        target = str(self.scratch / f"table-{output}")
        if local:
            with self._snapshot_write():
                df.write.mode("overwrite").partitionBy(*dirs).parquet(target)
        else:
            prefix = self._spark_write(
                f"table:{output}", df,
                self.storage.table_staging_dir,
                lambda d, p: d.write.mode("overwrite").partitionBy(*dirs).parquet(
                    spark_uri(store.uri(p))))
        rows = counted()
        if local:
            parts = sorted(p for p in Path(target).rglob("*.parquet"))
            self.writer.stage_table_output(output, spec, parts, rows=rows,
                                           names=[p.relative_to(target).as_posix()
                                                  for p in parts],
                                           table_storage=store, schema=schema,
                                           replaced=replaced)
            return rows
        keys = [o.key for o in store.list(prefix + "/") if o.key.endswith(".parquet")
                and not o.key.rsplit("/", 1)[-1].startswith((".", "_"))]
        self.writer.stage_stored_table_output(output, spec, keys, schema, rows=rows,
                                              table_storage=store, replaced=replaced)
        return rows

    def keep_table(self, output: str, spec: TableSpec, rows: int | None = None,
                   replaced: Any = ()) -> None:
        """Declare table output ``output`` unchanged by this epoch, without a Spark job: a
        ``replace_partitions`` table keeps the previous epoch's files (but those of the
        ``replaced`` partitions); its commit records the epoch with no data change."""
        if spec.mode != "replace_partitions":
            raise ValueError(f"keep_table needs mode replace_partitions, not {spec.mode!r}")
        self.writer.stage_stored_table_output(output, spec, [], None, rows=rows,
                                              table_storage=None, replaced=replaced)

    @contextlib.contextmanager
    def _snapshot_write(self):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.snapshot_write_ms += (time.monotonic() - t0) * 1000

    def stage_empty(self, output: str) -> None:
        """Stage ``output`` with no rows and no files, without a Spark job (downstream
        readers get an empty frame of the schema they read it with)."""
        self.writer.stage_stored_output(output, [], rows=0)

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


_PART = "part"


def _counting(df: Any, rows: int | None) -> tuple[Any, Callable[[], int]]:
    """``df`` observed so that the action writing it also counts its rows (Spark's
    ``Observation``: one pass, no count job), and a function giving the count after that
    action; with ``rows`` known, ``df`` unchanged and ``rows``."""
    if rows is not None:
        return df, lambda: rows
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    obs = Observation()
    return df.observe(obs, F.count(F.lit(1)).alias("rows")), lambda: int(obs.get["rows"])
_PARTITION_TYPES = ("string", "integer", "long", "short", "byte", "boolean", "date")


def _restored_from(coordinator: Coordinator, epoch_id: int,
                   previous: StateHandle | None) -> str:
    """What a task restores, for its log: a retry's first question is "from where?"."""
    barrier = coordinator.barrier(epoch_id)
    if previous is None:
        source = (f"savepoint {barrier.parent_savepoint!r}" if barrier.parent_savepoint else
                  f"epoch {barrier.parent_epoch_id}" if barrier.parent_epoch_id else None)
        return ("starts from empty state (no parent epoch)" if source is None else
                f"starts from empty state ({source} holds no state of this task)")
    files = previous.all_files()
    size = sum(f.size for f in files)
    via = f" (savepoint {barrier.parent_savepoint!r})" if barrier.parent_savepoint else ""
    return (f"restores from epoch {previous.epoch_id}{via}: attempt {previous.attempt}, "
            f"{len(files)} file(s), {size} bytes")


def partition_value(name: str) -> str | None:
    """The partition value in a state file's logical name (``bronze/part=<v>/...``)."""
    for seg in name.split("/"):
        if seg.startswith(f"{_PART}="):
            return seg[len(_PART) + 1:]
    return None


Job = Callable[[JobRun], JobResult]


def job_tag(pipeline_id: str, epoch_id: int, task_id: str, attempt: int) -> str:
    """The Spark job tag of one attempt's actions (``spark.addTag``): Spark's UI and REST
    API list every job an attempt ran under it, and ``spark.interruptTag`` cancels them.
    Tags may not hold commas; ids never do (PROTOCOL 3)."""
    return f"ckpt.{pipeline_id}.{task_id}.e{epoch_id}.a{attempt}"


def interrupt_attempt(spark: Any, tag: str) -> list[str]:
    """Cancel the Spark work of the attempt tagged ``tag`` (:func:`job_tag`), from any thread
    or a signal handler: the operations a Spark Connect server runs for it (the server keeps
    those of a client that went away running, for a retry to reattach to), or the jobs of a
    local session. Returns the ids of the operations interrupted (empty for a local one)."""
    return list(spark.interruptTag(tag) or [])


def run_task(job: Job, coordinator: Coordinator, epoch_id: int, task_id: str, attempt: int,
             spark: Any, data_uri: str, *, endpoint_url: str | None = None,
             overhead_ms: dict[str, float | None] | None = None,
             complete: bool = True) -> Acknowledgement:
    """Run one attempt of ``job`` under the checkpoint contract (module docstring).

    ``overhead_ms`` is what the caller spent before this call (starting the process,
    opening the Spark session): recorded in the handle's metrics as ``task_overhead_ms``
    (PROTOCOL's timings are a fixed set; metrics are free-form). ``complete``: the
    acknowledgement completes the epoch when it is the last (the coordinator decides)."""
    start = coordinator.register_attempt(epoch_id, task_id, attempt)
    if start.existing is not None:
        log.info("task %s already acknowledged epoch %d (attempt %d): not running again",
                 task_id, epoch_id, start.existing.attempt)
        return start.existing
    t0 = time.monotonic()
    started_at = now_iso(time.time())
    previous = coordinator.restore_handle(epoch_id, task_id)
    upstream = coordinator.upstream_handles(epoch_id, task_id)
    restore_ms = (time.monotonic() - t0) * 1000
    log.info("task %s attempt %d of epoch %d %s", task_id, attempt, epoch_id,
             _restored_from(coordinator, epoch_id, previous))
    scratch = Path(tempfile.mkdtemp(prefix=f"ckpt-{task_id}-e{epoch_id}-a{attempt}-"))
    storage = coordinator.task_storage(epoch_id, task_id, attempt)
    writer = storage.writer(previous)
    run = JobRun(coordinator, epoch_id, task_id, attempt, spark,
                 open_storage(data_uri, endpoint_url=endpoint_url) if data_uri else None,
                 previous, upstream, writer, scratch, storage,
                 resume=start.resume if is_connect(spark) else None,
                 table_offsets=dict(previous.table_offsets) if previous else {})
    tag = job_tag(coordinator.pipeline_id, epoch_id, task_id, attempt)
    spark.addTag(tag)
    try:
        t1 = time.monotonic()
        try:
            result = job(run)
        except DeclineEpoch as exc:
            coordinator.decline(epoch_id, task_id, attempt, str(exc))
            raise
        except Exception as exc:
            if is_connect(spark) and (msg := unsupported_feature(exc)):
                raise ConnectUnsupported(f"task {task_id}: {msg}") from None
            raise
        run_ms = (time.monotonic() - t1) * 1000  # includes writing the state files
        handle = writer.handle(
            offsets=result.offsets, row_counts=result.row_counts,
            metrics={**result.metrics, "bytes_referenced": writer.bytes_referenced,
                     "files_hashed_by_store": writer.hashed_by_store,
                     **({"table_inputs": run.table_reads} if run.table_reads else {}),
                     **({"resumed": {"from_attempt": run.resume.attempt,
                                     "actions": run.resumed}} if run.resumed else {}),
                     **({"task_overhead_ms": {k: round(v, 1) for k, v in overhead_ms.items()
                                              if v is not None}} if overhead_ms else {})},
            timings={"started_at": started_at, "restore_ms": round(restore_ms, 1),
                     "run_ms": round(run_ms, 1), "sync_ms": round(run.snapshot_write_ms, 1)},
            restored_from={"epoch_id": previous.epoch_id if previous else None},
            delivery=coordinator.barrier(epoch_id).mode,
            table_offsets=run.table_offsets,
        )
        try:
            # A leaf's acknowledgement that is the epoch's last completes it (the
            # coordinator decides), so its outputs publish now rather than one
            # orchestrator step later (PROTOCOL 6.5, 1.10).
            ack = coordinator.acknowledge(epoch_id, task_id, attempt, handle,
                                          complete=complete).acknowledgement
        except EpochAlreadyDecided:
            # Decided while the job ran (an operator's abort, a timeout): what the attempt
            # wrote under the epoch is nobody's; leave nothing behind (PROTOCOL 6.11).
            storage.discard()
            raise
        return ack
    finally:
        if run.resume is not None:
            # The killed attempt's session: its cached data, and its operation if this
            # attempt ran the action again instead of resuming it.
            release_session(spark, run.resume.session_id, run.resume.user_id)
        shutil.rmtree(scratch, ignore_errors=True)
        end_of_task(spark, tag)


def end_of_task(spark: Any, tag: str) -> None:
    """Drop the attempt's tag and cached data from its session. Jobs cache DataFrames for
    the length of one task; Spark matches cached data by plan, and a plan over the same
    file paths matches even when the files changed since: a session that outlives the task
    (embedded runs, the benchmarks) would read another attempt's or epoch's rows. Never
    raises: a session that is gone (a retry released a fenced attempt's) must not hide
    the error the attempt is ending with."""
    try:
        spark.removeTag(tag)
        spark.catalog.clearCache()
    except Exception as exc:  # noqa: BLE001 - any Spark or gRPC error of a dead session
        log.info("end of task: session not cleaned (%s)", str(exc).strip().splitlines()[0]
                 if str(exc).strip() else type(exc).__name__)
