"""Incremental snapshots (Flink's RocksDB incremental checkpoints + SharedStateRegistry).

A task's state is a set of named files. Taking a snapshot, a file whose size and sha256
equal a file of the previous epoch's handle is *referenced*, not uploaded again; a new or
changed file is uploaded, content-addressed under ``shared/`` (or attempt-private). Bytes
written per epoch therefore follow the change, not the total state.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from checkpointing.errors import IntegrityError
from checkpointing.json_types import JsonObject
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.state_handle import FileRef, OutputRef, StateHandle
from checkpointing.storage import Storage
from checkpointing.tables.spec import TableSpec

if TYPE_CHECKING:  # pyarrow comes with the table extras: imported where it is used
    import pyarrow as pa


#: a writer method, as the decorators below keep its signature
F = TypeVar("F", bound=Callable[..., Any])

#: the sha256 of a file written with checkpointing disabled (never hashed)
UNHASHED = "0" * 64


def sha256_file(path: str | os.PathLike[str]) -> tuple[str, int]:
    """(hex sha256, size) of a local file, streamed."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _persisting(method: F) -> F:
    """Count the time of a writer method that makes files durable into ``persist_ms``
    (not nested: add_directory calls add_file), holding the writer's lock."""

    @functools.wraps(method)
    def timed(self: SnapshotWriter, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            t0 = time.monotonic()
            try:
                return method(self, *args, **kwargs)
            finally:
                self.persist_ms += (time.monotonic() - t0) * 1000

    return cast(F, timed)


def _locked(method: F) -> F:
    """Hold the writer's lock: a job's writes running at once in threads of its own add to
    one snapshot."""

    @functools.wraps(method)
    def locked(self: SnapshotWriter, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(F, locked)


@dataclass
class SnapshotWriter:
    """Builds one task attempt's state handle, uploading only what changed."""

    storage: Storage
    layout: Layout
    epoch_id: int
    task_id: str
    attempt: int
    previous: StateHandle | None = None
    shared: bool = True
    #: False for a run with checkpointing disabled: files are not hashed (their sha256 is
    #: :data:`UNHASHED`), nothing is deduplicated, nothing can be verified
    digests: bool = True
    _files: dict[str, FileRef] = field(default_factory=dict)
    _outputs: dict[str, OutputRef] = field(default_factory=dict)
    bytes_written: int = 0
    #: of ``bytes_written``, the bytes of outputs staged for publication (not state)
    outputs_bytes_written: int = 0
    bytes_referenced: int = 0
    #: stored files whose sha256 came from the store's own checksum, not a download
    hashed_by_store: int = 0
    #: milliseconds spent making files durable (hashing, uploading, asking the store for
    #: checksums): the ``async_ms`` of the handle's timings, Flink's asynchronous part
    persist_ms: float = 0.0
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._previous_by_digest = {(f.sha256, f.size): f
                                    for f in (self.previous.files if self.previous else ())}

    @_persisting
    def add_file(self, name: str, path: str | os.PathLike[str]) -> FileRef:
        """Add a local file under logical ``name``; upload it only if it changed."""
        _check_name(name)
        digest, size = self._file_digest(path)
        prev = self._previous_by_digest.get((digest, size))
        if prev is not None:
            ref = FileRef(name, prev.uri, size, digest, prev.shared)
            self.bytes_referenced += size
        else:
            key = (self.layout.shared(digest) if self.shared
                   else self.layout.state_prefix(self.epoch_id, self.task_id, self.attempt) + name)
            self.storage.upload_file(key, str(path))
            ref = FileRef(name, self.storage.uri(key), size, digest, self.shared)
            self.bytes_written += size
        self._files[name] = ref
        return ref

    @_persisting
    def add_stored(self, name: str, key: str) -> FileRef:
        """Add a file a distributed writer (Spark executors) already put in storage under
        this attempt's prefix: hashed by streaming it back; if it equals a file of the
        previous snapshot, that one is referenced and this copy deleted."""
        _check_name(name)
        digest, size = self._stored_digest(key)
        prev = self._previous_by_digest.get((digest, size))
        if prev is not None:
            self.storage.delete(key)
            ref = FileRef(name, prev.uri, size, digest, prev.shared)
            self.bytes_referenced += size
        else:
            ref = FileRef(name, self.storage.uri(key), size, digest, False)
            self.bytes_written += size
        self._files[name] = ref
        return ref

    def _stored_digest(self, key: str, store: Storage | None = None) -> tuple[str, int]:
        """(sha256, size) of a file a distributed writer stored: the store's own checksum
        when it recorded one at upload (one HEAD), else by streaming the file back."""
        store = store or self.storage
        if not self.digests:
            return UNHASHED, store.head(key).size
        return _digest_of_stored(store, key, self)

    def _file_digest(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        """(sha256, size) of a local file (size only when ``digests`` is off)."""
        if not self.digests:
            return UNHASHED, os.path.getsize(path)
        return sha256_file(path)

    @_persisting
    def stage_stored_output(self, output: str, keys: list[str], rows: int | None = None,
                            meta: JsonObject | None = None) -> OutputRef:
        """Declare files already written under this attempt's staging prefix as an output."""
        refs = []
        for key in keys:
            digest, size = self._stored_digest(key)
            self.bytes_written += size
            self.outputs_bytes_written += size
            refs.append(FileRef(key.rsplit("/", 1)[-1], self.storage.uri(key), size,
                                digest, False))
        out = OutputRef(tuple(refs), rows, dict(meta or {}))
        self._outputs[output] = out
        return out

    @_locked
    def reference(self, ref: FileRef) -> FileRef:
        """Carry an unchanged file of an earlier epoch into this snapshot without copying."""
        _check_name(ref.name)
        self._files[ref.name] = ref
        self.bytes_referenced += ref.size
        return ref

    def add_directory(self, root: str | os.PathLike[str], prefix: str = "") -> list[FileRef]:
        """Add every file below ``root`` (named by its relative path), skipping Spark's
        checksum and marker files."""
        refs = []
        base = Path(root)
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            rel = path.relative_to(base).as_posix()
            if path.name.startswith((".", "_")):  # Spark's .crc files and _SUCCESS markers
                continue
            refs.append(self.add_file(prefix + rel, path))
        return refs

    @_locked
    def publish_files(self, output: str, refs: list[FileRef], rows: int | None = None,
                      meta: JsonObject | None = None) -> OutputRef:
        """Declare already-stored files (e.g. this snapshot's state files) as an output:
        published by reference, nothing is copied."""
        out = OutputRef(tuple(refs), rows, dict(meta or {}))
        self._outputs[output] = out
        return out

    @_persisting
    def stage_output(self, output: str, paths: Sequence[str | os.PathLike[str]],
                     rows: int | None = None, meta: JsonObject | None = None,
                     names: list[str] | None = None) -> OutputRef:
        """Stage files of an output under the attempt's staging prefix (phase one of the
        two-phase publish); they become visible only through the published manifest."""
        prefix = self.layout.staging_prefix(self.epoch_id, self.task_id, self.attempt)
        refs = []
        for i, path in enumerate(paths):
            name = names[i] if names else Path(path).name
            _check_name(name)
            digest, size = self._file_digest(path)
            key = f"{prefix}{output}/{name}"
            self.storage.upload_file(key, str(path))
            self.bytes_written += size
            self.outputs_bytes_written += size
            refs.append(FileRef(name, self.storage.uri(key), size, digest, False))
        out = OutputRef(tuple(refs), rows, dict(meta or {}))
        self._outputs[output] = out
        return out

    @_persisting
    def stage_table_output(self, output: str, spec: TableSpec,
                           paths: Sequence[str | os.PathLike[str]],
                           rows: int | None = None, names: list[str] | None = None,
                           table_storage: Storage | None = None,
                           schema: pa.Schema | None = None,
                           replaced: Iterable[object] = (), grows: bool = False) -> OutputRef:
        """Stage local Parquet files of a table output (PROTOCOL 6.12) into the table's own
        location, under :func:`checkpointing.tables.spec.staged_dir` (the table's log does not
        reference it; readers ignore it), to be committed when the epoch completes.
        ``names`` are paths inside that directory (``day=2013-01-02/part-0.parquet`` for a
        partitioned table); ``spec`` is a :class:`checkpointing.tables.spec.TableSpec`;
        ``schema`` (Arrow) defaults to the first file's, plus partition columns as
        strings. ``replaced`` names partitions (value tuples, or values for one partition
        column) the epoch replaces besides those it writes (recomputed and now empty).
        ``grows`` (``overwrite`` only): the files hold rows the epoch adds to the table's
        content after the previous epoch, whose files all stay (by reference)."""
        import pyarrow.parquet as pq

        from checkpointing.tables.spec import staged_dir

        store = table_storage or self._table_storage(spec)
        prefix = staged_dir(self.layout.pipeline_id, self.epoch_id, self.task_id, self.attempt)
        refs, records = [], {}
        for i, path in enumerate(paths):
            name = names[i] if names else Path(path).name
            _check_name(name)
            meta = pq.read_metadata(path)
            schema = schema or meta.schema.to_arrow_schema()
            digest, size = self._file_digest(path)
            key = f"{prefix}/{name}"
            store.upload_file(key, str(path))
            self.bytes_written += size
            self.outputs_bytes_written += size
            refs.append(FileRef(name, store.uri(key), size, digest, False))
            records[refs[-1].uri] = meta.num_rows  # by URI: names repeat across epochs
        return self._table_output(output, spec, refs, rows, schema, records, replaced, grows)

    @_persisting
    def stage_stored_table_output(self, output: str, spec: TableSpec, keys: list[str],
                                  schema: pa.Schema | None, rows: int | None = None,
                                  table_storage: Storage | None = None,
                                  replaced: Iterable[object] = (),
                                  grows: bool = False) -> OutputRef:
        """Declare Parquet files a distributed writer (Spark) already wrote into the table's
        staged directory as a table output; ``schema`` is the data's Arrow schema (None:
        the previous epoch's, for an epoch that writes nothing). ``replaced`` and ``grows``
        as for :meth:`stage_table_output`."""
        from checkpointing.tables.spec import staged_dir

        store = table_storage or self._table_storage(spec)
        prefix = staged_dir(self.layout.pipeline_id, self.epoch_id, self.task_id,
                            self.attempt) + "/"
        refs = []
        for key in keys:
            digest, size = self._stored_digest(key, store)
            self.bytes_written += size
            self.outputs_bytes_written += size
            refs.append(FileRef(key[len(prefix):] if key.startswith(prefix) else key,
                                store.uri(key), size, digest, False))
        return self._table_output(output, spec, refs, rows, schema, {}, replaced, grows)

    def _table_storage(self, spec: TableSpec) -> Storage:
        from checkpointing.storage import open_storage

        return open_storage(spec.location,
                            endpoint_url=self.storage.endpoint_url)

    def _table_output(self, output: str, spec: TableSpec, refs: list[FileRef], rows: int | None,
                      schema: pa.Schema | None, records: dict[str, int],
                      replaced: Iterable[object] = (), grows: bool = False) -> OutputRef:
        from checkpointing.tables.spec import table_schema_json

        if grows and spec.mode != "overwrite":
            raise ValueError(f"table output {output!r}: grows= needs mode overwrite, not "
                             f"{spec.mode!r}")
        prev = self.previous.outputs.get(output) if self.previous else None
        if schema is not None:
            schema_json = table_schema_json(schema, spec)
        elif prev is not None and "schema" in prev.meta:
            schema_json = prev.meta["schema"]
        else:
            raise ValueError(f"table output {output!r}: no file and no schema to stage")
        meta: JsonObject = {"table": spec.to_json(), "schema": schema_json,
                                "records": records}
        if spec.mode != "append":
            # (1.8) The output lists the table's whole content after this epoch: what it
            # staged plus what it keeps of the previous epoch's, so that committing it
            # anywhere (a backfill's promotion onto a table main moved on) is a diff.
            refs = refs + self._kept_table_files(output, prev, spec, refs, replaced, grows)
            meta["table_files"] = "all"
        out = OutputRef(tuple(refs), rows, meta)
        self._outputs[output] = out
        return out

    def previous_table_files(self, output: str, spec: TableSpec) -> list[FileRef] | None:
        """The files of table output ``output`` after the restored epoch, when its output
        listed the table's whole content (1.8) at ``spec``'s location: what an epoch can
        keep by reference. None otherwise (no previous epoch, an ``append`` or ``merge``
        output, another location)."""
        from checkpointing.tables.spec import TableSpec

        prev = self.previous.outputs.get(output) if self.previous else None
        if prev is None or prev.meta.get("table_files") != "all" or "table" not in prev.meta:
            return None
        if TableSpec.from_json(prev.meta["table"]).location != spec.location:
            return None
        return list(prev.files)

    def _kept_table_files(self, output: str, prev: OutputRef | None, spec: TableSpec,
                          staged: list[FileRef], replaced: Iterable[object],
                          grows: bool = False) -> list[FileRef]:
        """The previous epoch's files of a table output that stay in the table: none for
        ``overwrite``, all of them for an ``overwrite`` that ``grows`` (1.26: the epoch
        staged only the rows it adds); for ``replace_partitions``, those of the partitions
        this epoch neither wrote nor names in ``replaced``. Kept by reference; refused when
        the previous epoch partitioned the table otherwise (its files have no such
        partition), and a growth without such a previous output is refused (its files alone
        are not the table's content)."""
        from checkpointing.tables.spec import TableSpec, partition_key, require_same_partitioning

        if grows:
            kept = self.previous_table_files(output, spec)
            if kept is None or prev is None:
                raise ValueError(f"table output {output!r}: grows= needs the restored "
                                 "epoch's output of the same table listing its whole content")
            require_same_partitioning(
                list(TableSpec.from_json(prev.meta["table"]).partition_by), spec, output)
            self.bytes_referenced += sum(f.size for f in kept)
            return kept
        if (spec.mode != "replace_partitions" or prev is None
                or prev.meta.get("table_files") != "all"):
            return []
        before = TableSpec.from_json(prev.meta["table"])
        if before.location != spec.location:
            return []
        require_same_partitioning(list(before.partition_by), spec, output)
        gone = {partition_key(spec, f) for f in staged}
        gone |= {tuple(str(v) for v in p) if isinstance(p, tuple) else (str(p),)
                 for p in replaced}
        kept = [f for f in prev.files if partition_key(spec, f) not in gone]
        self.bytes_referenced += sum(f.size for f in kept)
        return kept

    @_locked
    def files(self, prefix: str = "") -> list[FileRef]:
        """The snapshot's files so far whose logical name starts with ``prefix``."""
        return [self._files[n] for n in sorted(self._files) if n.startswith(prefix)]

    @_locked
    def handle(self, **extra: Any) -> StateHandle:
        """The state handle for the acknowledgement. ``extra`` fills the other fields
        (offsets, row_counts, metrics, timings, restored_from, delivery)."""
        timings = dict(extra.pop("timings", {}) or {})
        timings.setdefault("async_ms", round(self.persist_ms, 3))
        return StateHandle(
            task_id=self.task_id, epoch_id=self.epoch_id, attempt=self.attempt,
            files=tuple(self._files[n] for n in sorted(self._files)),
            outputs=dict(self._outputs), bytes_written=self.bytes_written,
            timings=timings, **extra,
        )


def _check_name(name: str) -> None:
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in name.split("/")):
        raise ValueError(f"unsafe state file name {name!r}")


def state_file_key(storage: Storage, ref: FileRef) -> str:
    """The storage key of a state file, refused when its URI is outside ``storage``."""
    key = storage.key_for_uri(ref.uri)
    if key is None:
        raise IntegrityError(
            f"state file {ref.name!r} at {ref.uri} is outside {storage.describe()}")
    return key


def restore_files(storage: Storage, handle: StateHandle,
                  dest: str | os.PathLike[str]) -> list[Path]:
    """Download a handle's state files into ``dest`` (by logical name), verifying the size
    and sha256 of each; raise :class:`IntegrityError` on the first mismatch."""
    out = []
    for ref in handle.files:
        target = Path(dest) / ref.name
        target.parent.mkdir(parents=True, exist_ok=True)
        download_verified(storage, ref, target)
        out.append(target)
    return out


def download_verified(storage: Storage, ref: FileRef, target: Path) -> None:
    """Download one state file to ``target`` and check its size and sha256 (restore and
    verification share it); :class:`IntegrityError` names the file when it is missing or
    differs."""
    from checkpointing.errors import NotFound

    try:
        storage.download_file(state_file_key(storage, ref), str(target))
    except NotFound:
        raise IntegrityError(f"state file {ref.name!r} is missing: {ref.uri}") from None
    digest, size = sha256_file(target)
    if (digest, size) != (ref.sha256, ref.size):
        target.unlink(missing_ok=True)
        raise IntegrityError(
            f"state file {ref.name!r} at {ref.uri} is corrupt: size {size} sha256 "
            f"{digest[:12]}..., expected size {ref.size} sha256 {ref.sha256[:12]}...")


def _digest_of_stored(storage: Storage, key: str, writer: SnapshotWriter) -> tuple[str, int]:
    """(sha256, size) of a stored file: the store's own checksum when it recorded one at
    upload (one HEAD, counted in ``writer.hashed_by_store``), else by streaming it back."""
    known = storage.stored_sha256(key)
    if known is not None:
        writer.hashed_by_store += 1
        return known
    with tempfile.TemporaryDirectory(prefix="ckpt-hash-") as tmp:
        local = os.path.join(tmp, "f")
        storage.download_file(key, local)
        return sha256_file(local)
