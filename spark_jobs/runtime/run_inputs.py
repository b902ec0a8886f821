"""What a job reads in one attempt: the files landed since its state's offsets, an upstream
table's changes since the version its state consumed, and state and outputs of handles.
Part of :class:`~spark_jobs.runtime.JobRun`."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from checkpointing.protocol.documents import now_iso
from checkpointing.protocol.listings import FileListing, listing_source
from checkpointing.protocol.state_handle import FileRef, StateHandle
from checkpointing.protocol.table_inputs import TableInput, TableInputError, TableVersion
from checkpointing.storage import ObjectInfo, Storage
from checkpointing.tables.spec import TableSpec

from .errors import DeclineEpoch
from .file_source import MAX_FILE_AGE_SECONDS, NewInput, SeenIndex, new_input
from .run_context import RunContext
from .session import spark_uri
from .table_source import TableChanges

_RUN_UNTIL = object()  # new_input's default: the epoch's data interval end
_PREVIOUS = object()  # new_input's default offsets: the previous handle's
#: where a task's index of consumed files is kept in its state
SEEN_FILES = "seen_files/"

log = logging.getLogger("spark_jobs.runtime")


class RunInputs(RunContext):
    """A job run's reading side (JobRun's fields: barrier, epoch_id, task_id, spark,
    data, previous, writer, scratch, storage, table_offsets, table_reads)."""

    @property
    def input_until(self) -> str | None:
        """The day (ISO date) at which this epoch's input stops, from the barrier's data
        interval end; None when the epoch has no interval (consume everything new)."""
        return self.barrier.input_until

    @property
    def data_root(self) -> Storage:
        """The data root the run was given (``--data`` / ``CKPT_DATA``): ``run.data``, for a
        job that cannot run without one. A run given none fails here, naming the setting,
        instead of at the first ``None.uri``."""
        if self.data is None:
            raise ValueError("this job reads the data root, and the run was given none "
                             "(set --data or CKPT_DATA)")
        return self.data

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
                  max_age_seconds: float = MAX_FILE_AGE_SECONDS,
                  offsets: dict[str, Any] | None | object = _PREVIOUS,
                  seen: str = "") -> NewInput:
        """The files landed under ``prefix`` of the data root that no earlier epoch of
        this task consumed, up to the epoch's input end (``until``: default the data
        interval's end; None: everything landed). ``.new`` are the keys to read;
        ``.replaced`` those of them that rewrite a file consumed before, *whatever its
        age* (a correction: retract what the old content contributed); ``.late`` new keys
        named for a day already consumed. Return ``.offsets`` in the JobResult.

        The task keeps a :class:`~spark_jobs.runtime.file_source.SeenIndex` of every file
        it consumed in its state (``seen_files/<month>.json``): only the months of the
        files it consumes are read and rewritten, the others carried by reference.

        A task reading several prefixes (a view's file inputs) keeps each one's offsets
        where it likes and passes them (``offsets``: default the previous handle's), and
        names where each one's index lives in its state (``seen``: default
        ``seen_files/``).

        Every task and attempt of the epoch reads from the same files: those of the
        epoch's first listing of the prefix (PROTOCOL 6.16)."""
        seen = seen or SEEN_FILES
        stored = {f.name.removeprefix(seen).removesuffix(".json"): f
                  for f in (self.previous.files if self.previous else ())
                  if f.name.startswith(seen)}
        def load(bucket: str) -> dict[str, str] | None:
            ref = stored.get(bucket)
            if ref is None:
                return None
            return SeenIndex.parse(self.storage.read(ref))

        data = self.data_root
        self.input_prefixes.append(prefix)
        index = SeenIndex(load, suffix)
        previous = (self.previous.offsets if self.previous else None) \
            if offsets is _PREVIOUS else cast(dict[str, Any] | None, offsets)
        found = new_input(data, prefix, previous,
                          until=(self.input_until if until is _RUN_UNTIL
                                 else cast(str | None, until)),
                          max_age_seconds=max_age_seconds, suffix=suffix, index=index,
                          listing=self._listed(data, prefix))
        for bucket, ref in stored.items():
            if bucket not in index.changed:
                self.writer.reference(ref)
        for bucket, body in index.documents().items():
            path = self.scratch / f"seen-{seen.replace('/', '_')}{bucket}.json"
            path.write_bytes(body)
            self.writer.add_file(f"{seen}{bucket}.json", path)
        return found

    def _listed(self, data: Storage, prefix: str) -> list[ObjectInfo]:
        """The objects under ``prefix`` of ``data`` this epoch reads (PROTOCOL 6.16): of
        those listed now, the ones whose keys the epoch's first listing of the prefix
        holds. The first attempt to list it records its keys, so a file that lands
        later is left to the next epoch by every task and attempt; a file deleted since
        that listing is not read (a deleted file retracts nothing)."""
        now = list(data.list(prefix))
        mine = FileListing(prefix, tuple(i.key for i in now), self.task_id, self.attempt,
                           now_iso(time.time()))
        pinned = self.listings.pin_listing(self.epoch_id, listing_source(data.uri(""), prefix),
                                           mine)
        if pinned is mine:
            return now
        keys = set(pinned.keys)
        kept = [i for i in now if i.key in keys]
        if len(kept) < len(now):
            log.info("task %s: %d file(s) under %s landed after the epoch's listing "
                     "(attempt %d of task %s); the next epoch reads them", self.task_id,
                     len(now) - len(kept), prefix, pinned.attempt, pinned.task_id)
        return kept

    def data_uri(self, key: str) -> str:
        """The URI Spark reads ``key`` of the data root at (a reference file read whole
        every epoch: a dimension CSV), recorded as a file input of the task, so that its
        lineage names the read as it names :meth:`new_input`'s prefixes."""
        data = self.data_root
        self.input_prefixes.append(key)
        return spark_uri(data.uri(key))

    def table_changes(self, name: str, *, verify: bool | None = None) -> TableChanges:
        """The rows upstream table input ``name`` (declared on the task: ``table_inputs=``
        of the operator or decorator) added and removed since the version this task's
        parent epoch consumed, up to the version the epoch's barrier pinned (PROTOCOL
        6.14): ``.added`` and ``.removed`` DataFrames (``.signed()`` both with a +1/-1
        column), ``.start``/``.end`` the version range. The first epoch (no parent state
        of the input) reads the table's whole content at the pinned version. Every attempt
        of the epoch reads the same change; the consumed version is recorded in the
        task's state handle (``table_offsets``) when it acknowledges. A change that cannot
        be read (an incompatible schema change, a version the table's VACUUM or log
        retention removed, deletion vectors) declines the epoch with one line.

        ``verify`` (default: every ``verify_table_inputs_every`` epochs of the pipeline's
        configuration) checks the change set against the difference of the table's whole
        content at the two versions and declines the epoch on a mismatch
        (:func:`~spark_jobs.runtime.table_source.verify_changes`); it reads the table twice."""
        import time

        from .table_source import read_changes, verify_changes

        spec, end = self._pinned_input(name)
        start = self.table_offsets.get(name)
        if verify is None:
            every = self.barrier.config.verify_table_inputs_every
            verify = bool(every) and self.epoch_id % every == 0
        try:
            found = read_changes(self.spark, name, spec, start, end,
                                 self.storage.endpoint_url)
            checked = time.perf_counter()
            if verify:
                verify_changes(self.spark, name, spec, found, self.storage.endpoint_url)
        except TableInputError as exc:
            raise DeclineEpoch(str(exc)) from None
        self.table_offsets[name] = end
        self.table_reads[name] = found.metrics()
        if found.change_set.renamed:
            self.table_renames[name] = found.change_set.renamed
        if verify:
            self.table_reads[name]["verified_ms"] = round(
                (time.perf_counter() - checked) * 1000, 1)
        log.info("task %s reads table input %s: versions %s..%s, %d file(s) added, %d "
                 "removed", self.task_id, name, "start" if start is None else start.version,
                 end.version, len(found.change_set.added), len(found.change_set.removed))
        return found

    def table_snapshot(self, name: str) -> Any:
        """The whole content of upstream table input ``name`` at the version the epoch's
        barrier pinned, as a Spark DataFrame: the same rows on every attempt of the epoch,
        whatever the table's writers did since (a dimension table to join with). Unlike
        :meth:`table_changes` it consumes nothing: the input's recorded version does not
        move. A table that cannot be read declines the epoch with one line."""
        from .table_source import read_changes

        spec, end = self._pinned_input(name)
        try:
            found = read_changes(self.spark, name, spec, None, end, self.storage.endpoint_url)
        except TableInputError as exc:
            raise DeclineEpoch(str(exc)) from None
        self.table_reads.setdefault(name, found.metrics())
        return found.added

    def _pinned_input(self, name: str) -> tuple[TableInput, TableVersion]:
        """Table input ``name`` of this task and the version the epoch's barrier pinned."""
        barrier = self.barrier
        spec = barrier.plan[self.task_id].table_inputs.get(name) \
            if self.task_id in barrier.plan else None
        end = barrier.table_version(name)
        if spec is None or end is None:
            declared = sorted(barrier.plan[self.task_id].table_inputs) \
                if self.task_id in barrier.plan else []
            raise ValueError(f"task {self.task_id!r} has no table input {name!r} in its "
                             f"epoch's plan (declared: {declared or 'none'}); declare it "
                             "with table_inputs={...} on the task")
        return spec, end

    def read_table(self, handle: StateHandle | None, output: str) -> Any:
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

    def read_parquet(self, refs: list[FileRef], schema: Any) -> Any:
        """A DataFrame over stored parquet files (empty with ``schema`` when none)."""
        if not refs:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).parquet(*[spark_uri(r.uri) for r in refs])
