"""Apache Iceberg committer of table outputs (PROTOCOL 6.12), through pyiceberg and a
catalog of the user's (a SQL catalog on PostgreSQL here; any pyiceberg catalog works).

As Flink's Iceberg sink does, the epoch id goes into the snapshot summary
(``ckpt.app_id``, ``ckpt.epoch_id``; Flink: ``flink.job-id``,
``flink.max-committed-checkpoint-id``): before committing, the committer walks the current
snapshot's ancestry to the newest snapshot of its ``app_id`` and commits nothing when that
one already holds the epoch or a later one. The epoch's staged Parquet files are added as
they are (their statistics give the partition values, so Iceberg files keep their partition
columns), and the files the epoch replaces are deleted, in one ``overwrite`` snapshot. The
catalog's optimistic commit (compare-and-swap of the metadata location) makes a racing
commit fail; the table is read again and the summary decides.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from checkpointing.errors import NotFound
from checkpointing.extras import require
from checkpointing.json_types import JsonObject
from checkpointing.protocol.state_handle import FileRef
from checkpointing.protocol.table_formats import traits
from checkpointing.protocol.table_inputs import (
    EMPTY,
    WAY_FORWARD,
    ChangeSet,
    DataFile,
    IncompatibleSchema,
    TableInput,
    TableInputError,
    TableVersion,
    check_schema,
)
from checkpointing.tables.spec import (
    DELETE_COLUMN,
    TableCommit,
    TableCommitError,
    TableSpec,
    TableVacuum,
    diff_with_table,
    read_staged_rows,
    require_same_partitioning,
)
from checkpointing.tables.table_format import TableFormat

if TYPE_CHECKING:  # the format's libraries are an extra: imported where they are used
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile as IcebergFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot


log = logging.getLogger("checkpointing.tables.iceberg")
_ATTEMPTS = 8


def file_path(uri: str) -> str:
    """A file's path as Iceberg's FileIO opens it (``s3://``, or ``file://`` unquoted)."""
    if uri.startswith("s3a://"):
        return "s3://" + uri[len("s3a://"):]
    return "file://" + unquote(urlparse(uri).path) if uri.startswith("file://") else uri


def load_catalog(spec: TableSpec | _CatalogOnly, endpoint_url: str | None = None) -> Catalog:
    """The table's catalog, configured by pyiceberg's own configuration; an S3-compatible
    endpoint (MinIO) is added for S3 locations. Credentials come from that configuration
    or the standard AWS environment."""
    require("pyiceberg", "iceberg", "an Iceberg table output")
    from pyiceberg.catalog import load_catalog as load
    from pyiceberg.utils.config import Config

    # pyiceberg reads its environment once, at import; read it again: a worker's
    # environment may be set after that (and a test's is).
    props = dict(Config().get_catalog_config(spec.catalog) or {})
    if endpoint_url and urlparse(spec.location).scheme in ("s3", "s3a"):
        props.update({"s3.endpoint": endpoint_url, "s3.region": "us-east-1"})
    try:
        return load(spec.catalog, **props)
    except Exception as exc:  # noqa: BLE001 - pyiceberg raises plain errors for config
        raise TableCommitError(f"Iceberg catalog {spec.catalog!r} cannot be loaded: "
                               f"{type(exc).__name__}: {str(exc)[:200]} (configure it with "
                               f"PYICEBERG_CATALOG__{spec.catalog.upper()}__* or "
                               ".pyiceberg.yaml)") from None


def open_table(spec: TableSpec, endpoint_url: str | None = None) -> Table:
    return load_catalog(spec, endpoint_url).load_table(spec.name)


def _same_partitioning(table: Table, spec: TableSpec, app: str) -> None:
    """Refuse an output partitioned otherwise than its existing table: a staged file
    holding several values of the table's partition column cannot be added to it, and the
    files a ``replace_partitions`` output replaces are found by the output's partition
    columns. Non-identity partitions (a table made elsewhere) are named by their
    transform."""
    schema = table.schema()
    have = []
    for field in table.spec().fields:
        col = schema.find_column_name(field.source_id)
        have.append(col if str(field.transform) == "identity" else f"{field.transform}({col})")
    require_same_partitioning(have, spec, app)


class IcebergCommitter:
    """Commits staged files of one epoch to an Iceberg table, exactly once per epoch."""

    def __init__(self, endpoint_url: str | None = None):
        self.endpoint_url = endpoint_url

    def commit(self, spec: TableSpec, app: str, epoch_id: int, files: tuple[FileRef, ...],
               meta: JsonObject) -> TableCommit:
        require("pyiceberg", "iceberg", "an Iceberg table output")
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        if "schema" not in meta:
            raise TableCommitError(f"output of table {app!r} has no schema in its state "
                                   "handle (stage it with stage_table_output)")
        catalog = load_catalog(spec, self.endpoint_url)
        last: Exception | None = None
        for _ in range(_ATTEMPTS):
            table = self._open(catalog, spec, _arrow_schema(meta["schema"]))
            done = committed_snapshot(table, app, epoch_id)
            if done is not None:
                return TableCommit(done, False)
            if spec.mode != "merge":  # a merge writes through pyiceberg, as the table is
                _same_partitioning(table, spec, app)
            try:
                snapshot = self._commit(table, spec, app, epoch_id, files, meta)
            except (CommitFailedException, ValidationException) as exc:
                # A concurrent commit won (pyiceberg's own retry of a table created
                # elsewhere ends in its concurrency validation): look again.
                last = exc
                continue
            except (TableCommitError, NotFound):
                raise
            except Exception as exc:  # noqa: BLE001 - pyiceberg raises plain errors for I/O
                raise TableCommitError(f"commit of epoch {epoch_id} to table {app!r} failed: "
                                       f"{type(exc).__name__}: {str(exc)[:200]}") from None
            log.info("table %s: epoch %d committed as snapshot %d (%d file(s))", app,
                     epoch_id, snapshot, len(files))
            return TableCommit(snapshot, True)
        raise TableCommitError(f"table {app!r}: epoch {epoch_id} not committed after "
                               f"{_ATTEMPTS} concurrent commits ({last})")

    @staticmethod
    def _open(catalog: Catalog, spec: TableSpec, schema: pa.Schema) -> Table:
        """The table, created (schema, identity partitions, the name mapping that lets
        Iceberg read files written without field ids) by the first epoch that commits."""
        from pyiceberg.exceptions import (
            CommitFailedException,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        try:
            return catalog.load_table(spec.name)
        except NoSuchTableError:
            pass
        catalog.create_namespace_if_not_exists(str(spec.name).rsplit(".", 1)[0])
        try:
            tx = catalog.create_table_transaction(spec.name, schema=schema,
                                                  location=spec.location)
            if spec.partition_by:
                with tx.update_spec() as update:
                    for col in spec.partition_by:
                        update.add_identity(col)
            tx.set_properties(**{
                "schema.name-mapping.default":
                    tx.table_metadata.schema().name_mapping.model_dump_json(),
                # no blind retry: the committer re-reads the summaries after a conflict
                "commit.retry.num-retries": "0"})
            tx.commit_transaction()
        except (TableAlreadyExistsError, CommitFailedException) as exc:  # created concurrently
            log.info("table %s was created concurrently (%s)", spec.name, type(exc).__name__)
        return catalog.load_table(spec.name)

    def _commit(self, table: Table, spec: TableSpec, app: str, epoch_id: int,
                files: tuple[FileRef, ...], meta: JsonObject) -> int:
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        if spec.mode == "merge":
            return self._merge(table, spec, app, epoch_id, files)
        current = {task.file.file_path: task.file for task in table.scan().plan_files()} \
            if table.current_snapshot() is not None else {}
        if meta.get("table_files") == "all":
            listed, gone = diff_with_table(spec, app, epoch_id, files, current,
                                           lambda f: file_path(f.uri), self.endpoint_url)
            adds, removes = [file_path(f.uri) for f in listed], [current[p] for p in gone]
        else:  # append: the epoch's files the table does not hold yet
            adds = [p for p in dict.fromkeys(file_path(f.uri) for f in files)
                    if p not in current]
            removes = []
        tx = table.transaction()
        props = {"ckpt.app_id": app, "ckpt.epoch_id": str(epoch_id)}
        with tx.update_snapshot(snapshot_properties=props).overwrite() as producer:
            for df in removes:
                producer.delete_data_file(df)
            for path in adds:
                producer.append_data_file(parquet_file_to_data_file(table.io,
                                                                    tx.table_metadata, path))
        tx.commit_transaction()
        return int(table.refresh().current_snapshot().snapshot_id)

    def _merge(self, table: Table, spec: TableSpec, app: str, epoch_id: int,
               files: tuple[FileRef, ...]) -> int:
        """A ``merge`` output in one transaction: the rows of every key the epoch changed
        deleted (copy-on-write: pyiceberg rewrites the files holding them), the upserted
        rows appended; both snapshots carry the epoch in their summaries."""
        import pyarrow.compute as pc
        from pyiceberg.expressions import And, EqualTo, In, IsNull, Or

        rows = read_staged_rows(spec, files, self.endpoint_url)
        props = {"ckpt.app_id": app, "ckpt.epoch_id": str(epoch_id)}
        tx = table.transaction()
        if rows is None or rows.num_rows == 0:
            tx.append(table.schema().as_arrow().empty_table(), snapshot_properties=props)
        else:
            keys = rows.select(list(spec.keys)).to_pylist()
            # A NULL key is one key (as GROUP BY sees it): matched by IS NULL, which no
            # equality or IN matches.
            if len(spec.keys) == 1:
                k = spec.keys[0]
                values = sorted({r[k] for r in keys if r[k] is not None}, key=str)
                nulls = any(r[k] is None for r in keys)
                picks = ([In(k, values)] if values else []) + ([IsNull(k)] if nulls else [])
                changed = picks[0] if len(picks) == 1 else Or(*picks)
            else:
                parts = [And(*(IsNull(k) if r[k] is None else EqualTo(k, r[k])
                               for k in spec.keys)) for r in keys]
                changed = parts[0] if len(parts) == 1 else Or(*parts)
            if table.current_snapshot() is not None:
                # A merge whose rows are all new deletes nothing: pyiceberg warns of it, in
                # every such epoch's task log, for what is the expected case here.
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "Delete operation did not match any "
                                            "records", UserWarning)
                    tx.delete(changed, snapshot_properties=props)
            upserts = rows.filter(pc.invert(rows[DELETE_COLUMN])).drop_columns([DELETE_COLUMN])
            tx.append(upserts.cast(table.schema().as_arrow()), snapshot_properties=props)
        tx.commit_transaction()
        return int(table.refresh().current_snapshot().snapshot_id)


def committed_snapshot(table: Table, app: str, epoch_id: int) -> int | None:
    """The snapshot holding epoch ``epoch_id`` of ``app``, if that epoch is committed: the
    newest snapshot of ``app`` in the current snapshot's ancestry holds it or a later epoch
    (Flink's max committed checkpoint id); None otherwise."""
    newest = None
    for snap in _ancestry(table):
        if snap.summary is None or snap.summary.get("ckpt.app_id") != app:
            continue
        epoch = int(snap.summary.get("ckpt.epoch_id", "0"))
        if newest is None:
            if epoch < epoch_id:
                return None
            newest = int(snap.snapshot_id)
        if epoch <= epoch_id:
            return int(snap.snapshot_id) if epoch == epoch_id else newest
    return newest


def _ancestry(table: Table) -> Iterator[Snapshot]:
    snap = table.current_snapshot()
    while snap is not None:
        yield snap
        snap = (table.snapshot_by_id(snap.parent_snapshot_id)
                if snap.parent_snapshot_id is not None else None)


def _arrow_schema(encoded: str) -> pa.Schema:
    import base64

    import pyarrow as pa

    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))


# ---------------------------------------------------------------------- table inputs
# An Iceberg table as an incremental input (PROTOCOL 6.14): the current snapshot pins the
# epoch (its sequence number orders versions); the change of (start, end] is the difference
# between the two snapshots' live rows, a row named by its data file and its position in
# it: files only one snapshot has are added or removed (less the rows their delete files
# delete), and a file both have whose deleted positions differ (a merge-on-read DELETE,
# UPDATE or MERGE wrote position deletes or a deletion vector for it) retracts exactly the
# rows deleted in between. Which delete files apply comes from the manifests (the table's
# metadata); only the delete files of the files that changed are read. Equality deletes
# name rows by value, not position: refused, not misread.

def _input_table(spec: TableInput, endpoint_url: str | None) -> Table:
    from pyiceberg.exceptions import NoSuchTableError


    require("pyiceberg", "iceberg", "an Iceberg table input")
    location = spec.location or ""
    catalog = load_catalog(TableSpec(location or "s3://unknown", format="iceberg",
                                     name=spec.name, catalog=spec.catalog)
                           if location else _CatalogOnly(spec.catalog), endpoint_url)
    try:
        return catalog.load_table(spec.name)
    except NoSuchTableError:
        raise TableInputError(f"table input {spec.label!r}: no such Iceberg table in catalog "
                              f"{spec.catalog!r}") from None


class _CatalogOnly:
    """What :func:`load_catalog` reads of a spec, for an input declared without location."""

    def __init__(self, catalog: str):
        self.catalog, self.location = catalog, ""


def pin_version(spec: TableInput, endpoint_url: str | None) -> TableVersion:
    """The current snapshot (its sequence number and id); EMPTY-like version -1 when the
    table has no snapshot yet."""

    snap = _input_table(spec, endpoint_url).current_snapshot()
    if snap is None:
        return EMPTY
    return TableVersion(int(snap.sequence_number), int(snap.snapshot_id))


def committed_version(spec: TableInput, committed: int,
                      endpoint_url: str | None) -> TableVersion:
    """A snapshot id this library committed, as a reader's version (with its sequence
    number)."""
    snap = _input_table(spec, endpoint_url).snapshot_by_id(committed)
    if snap is None:
        raise TableInputError(f"table {spec.label!r}: snapshot {committed} was expired; "
                              f"{WAY_FORWARD}")
    return TableVersion(int(snap.sequence_number), int(snap.snapshot_id))


def version_before(spec: TableInput, version: int, endpoint_url: str | None) -> TableVersion:
    """The newest snapshot of the current ancestry whose sequence number is below
    ``version`` (a ``starting_version`` read begins after it)."""

    for snap in _ancestry(_input_table(spec, endpoint_url)):
        if snap.sequence_number < version:
            return TableVersion(int(snap.sequence_number), int(snap.snapshot_id))
    return EMPTY


def _snapshot(spec: TableInput, table: Table, version: TableVersion) -> Snapshot:

    snap = table.snapshot_by_id(version.snapshot_id) if version.snapshot_id is not None \
        else None
    if snap is None:
        raise TableInputError(
            f"table input {spec.label!r}: snapshot {version.snapshot_id} (sequence number "
            f"{version.version}) was expired from the table; the changes since it cannot be "
            f"read: {WAY_FORWARD}")
    return snap


def _iceberg_schema(table: Table, snap: Snapshot) -> Schema:
    if snap.schema_id is None:
        return table.schema()
    return next(s for s in table.schemas().values() if s.schema_id == snap.schema_id)


def _snapshot_schema(table: Table, snap: Snapshot) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(_iceberg_schema(table, snap), include_field_ids=False)


def _by_field_id(schema: Schema) -> pa.Schema:
    """``schema``'s columns named by their field ids: what a schema change is compared by
    (a rename keeps the id, a column dropped and added again has a new one)."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(schema, include_field_ids=False)
    return pa.schema([f.with_name(str(field.field_id))
                      for f, field in zip(arrow, schema.fields, strict=True)])


#: A table's name mapping: files written without field ids (Spark's files this project's
#: committer adds, ``add_files``) get their ids from it, by the name they give a column
_NAME_MAPPING = "schema.name-mapping.default"


def _by_id(table: Table) -> bool:
    """Whether the table's data files carry field ids (a table without a name mapping:
    Iceberg's spec requires them), so that a reader matches columns by id, not by name."""
    return _NAME_MAPPING not in table.properties


def _refuse_reused_names(spec: TableInput, table: Table, schema: Schema) -> None:
    """Files read by name (:func:`_by_id`) cannot tell a column dropped and added again
    under its name from the dropped one: refuse a table whose schemas ever gave a column
    of ``schema`` another field id."""
    ids: dict[str, set[int]] = {}
    for s in table.schemas().values():
        for f in s.fields:
            ids.setdefault(f.name, set()).add(f.field_id)
    for f in schema.fields:
        if len(ids.get(f.name, ())) > 1:
            raise IncompatibleSchema(
                f"table input {spec.label!r}: column {f.name!r} was dropped and added again "
                "under its name, and the table's files are read by name (it has a name "
                "mapping); its older files would give the dropped column's values")


def _schema_change(spec: TableInput, table: Table, start: Snapshot, end: Snapshot,
                   end_version: int) -> dict[str, tuple[str, int]]:
    """Refuse a retyped column between ``start`` and ``end``; an added, renamed or dropped
    one is read (files are matched by field id). Returns the renames: old name -> (new
    name, the sequence number of the first snapshot with a schema other than ``start``'s).
    A table whose files are read by name (:func:`_by_id`) refuses a rename, a drop and a
    column dropped and added again under its name (its older files would give the dropped
    column's values)."""
    old, new = _iceberg_schema(table, start), _iceberg_schema(table, end)
    if old.schema_id == new.schema_id:
        return {}
    if not _by_id(table):
        check_schema(spec.label, _snapshot_schema(table, start), _snapshot_schema(table, end),
                     end_version)
        return {}
    changed_at = end_version
    snap: Snapshot | None = end
    while snap is not None and snap.snapshot_id != start.snapshot_id:
        if snap.schema_id != old.schema_id and snap.sequence_number is not None:
            changed_at = int(snap.sequence_number)
        snap = (table.snapshot_by_id(snap.parent_snapshot_id)
                if snap.parent_snapshot_id is not None else None)
    check_schema(spec.label, _by_field_id(old), _by_field_id(new), changed_at,
                 drops_allowed=True)
    names = {f.field_id: f.name for f in old.fields}
    return {names[f.field_id]: (f.name, changed_at) for f in new.fields
            if f.field_id in names and names[f.field_id] != f.name}


def schema_at(spec: TableInput, version: TableVersion, endpoint_url: str | None) -> pa.Schema:
    import pyarrow as pa

    if version.snapshot_id is None:
        return pa.schema([])
    table = _input_table(spec, endpoint_url)
    return _snapshot_schema(table, _snapshot(spec, table, version))


def log_partition_columns(spec: TableInput, version: TableVersion,
                          endpoint_url: str | None) -> list[str]:
    return []  # Iceberg's data files hold their partition columns


@dataclass(frozen=True)
class _Live:
    """A data file of a snapshot and the delete files that apply to it there."""

    file: IcebergFile
    deletes: tuple[IcebergFile, ...]

    @property
    def delete_paths(self) -> frozenset[str]:
        return frozenset(d.file_path for d in self.deletes)


def _files(spec: TableInput, table: Table, snap: Snapshot) -> dict[str, _Live]:
    from pyiceberg.manifest import DataFileContent

    refusal = TableInputError(
        f"table input {spec.label!r}: snapshot {snap.snapshot_id} has equality deletes "
        "(written by streaming writers), which name deleted rows by value and which table "
        "inputs do not read; compact the table (rewrite_data_files applies them) or write "
        "it with position deletes")
    # The snapshot's summary counts them (pyiceberg's planner refuses them with a raw
    # error of its own): said before planning, in one line.
    if int((snap.summary or {}).get("total-equality-deletes", "0") or 0) > 0:
        raise refusal
    files = {}
    for task in table.scan(snapshot_id=snap.snapshot_id).plan_files():
        if any(d.content == DataFileContent.EQUALITY_DELETES for d in task.delete_files):
            raise refusal
        files[task.file.file_path] = _Live(task.file, tuple(task.delete_files))
    return files


def _deleted(table: Table, live: _Live, cache: dict[str, dict[str, Any]]) -> Any:
    """The positions the delete files of ``live`` delete in its data file, sorted (Parquet
    position delete files and format 3's deletion vectors, read by pyiceberg's own reader
    of them, each delete file once per change set)."""
    import numpy as np
    from pyiceberg.io.pyarrow import _read_deletes

    found = []
    for d in live.deletes:
        if d.file_path not in cache:
            cache[d.file_path] = _read_deletes(table.io, d)
        positions = cache[d.file_path].get(live.file.file_path)
        if positions is not None:
            found.append(np.asarray(positions.to_numpy() if hasattr(positions, "to_numpy")
                                    else positions, dtype=np.int64))
    return np.unique(np.concatenate(found)) if found else np.array([], dtype=np.int64)


def read_changes(spec: TableInput, start: TableVersion | None, end: TableVersion,
                 endpoint_url: str | None) -> ChangeSet:
    """The change set of (``start``, ``end``]: the rows live at snapshot ``end`` that are
    not live at ``start`` (added) and those live at ``start`` and not at ``end``
    (removed), by data file and position."""
    import dataclasses

    import numpy as np
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from checkpointing.storage import open_storage

    table = _input_table(spec, endpoint_url)
    if end.snapshot_id is None:  # no snapshot at the pin: nothing to read
        import pyarrow as pa

        return ChangeSet(start, end, (), (), pa.schema([]), (), 0)
    end_snap = _snapshot(spec, table, end)
    end_schema = _iceberg_schema(table, end_snap)
    schema = schema_to_pyarrow(end_schema, include_field_ids=False)
    field_ids = {f.name: f.field_id for f in end_schema.fields} if _by_id(table) else {}
    if not field_ids:
        _refuse_reused_names(spec, table, end_schema)
    now = _files(spec, table, end_snap)
    before: dict[str, _Live] = {}
    renamed: dict[str, tuple[str, int]] = {}
    reads = 1
    if start is not None and start.snapshot_id is not None:
        start_snap = _snapshot(spec, table, start)
        renamed = _schema_change(spec, table, start_snap, end_snap, end.version)
        before, reads = _files(spec, table, start_snap), 2
    cache: dict[str, dict[str, Any]] = {}

    def data_file(path: str, f: IcebergFile) -> DataFile:
        return DataFile(path, int(f.file_size_in_bytes), {}, int(f.record_count))

    def whole(path: str, live: _Live) -> DataFile:
        f = data_file(path, live.file)
        gone = _deleted(table, live, cache) if live.deletes else ()
        return dataclasses.replace(f, skip_rows=tuple(int(i) for i in gone)) if len(gone) \
            else f

    added = [whole(p, f) for p, f in now.items() if p not in before]
    removed = [whole(p, f) for p, f in before.items() if p not in now]
    for path in now.keys() & before.keys():
        old, new = before[path], now[path]
        if old.delete_paths == new.delete_paths:
            continue  # the same delete files: the same rows live
        was, now_deleted = _deleted(table, old, cache), _deleted(table, new, cache)
        gone = np.setdiff1d(now_deleted, was)  # deleted in between: retract
        back = np.setdiff1d(was, now_deleted)  # deleted no more (a rollback): add
        if len(gone):
            removed.append(dataclasses.replace(data_file(path, new.file),
                                               only_rows=tuple(int(i) for i in gone)))
        if len(back):
            added.append(dataclasses.replace(data_file(path, new.file),
                                             only_rows=tuple(int(i) for i in back)))
    if removed:
        store = open_storage(table.location(), endpoint_url=endpoint_url)
        gone_files = [f for f in removed if not store.exists(store.key_for_uri(f.uri) or "")]
        if gone_files and start is not None:  # files are removed only since a start
            raise TableInputError(
                f"table input {spec.label!r}: {len(gone_files)} file(s) removed after snapshot "
                f"{start.snapshot_id} were already deleted (orphan-file cleanup), so their "
                f"rows cannot be retracted; {WAY_FORWARD}")
    return ChangeSet(start, end, tuple(added), tuple(removed), schema, (), reads,
                     renamed=renamed, field_ids=field_ids)


# ---------------------------------------------------------------------- VACUUM (6.13)

def vacuum(output: str, spec: TableSpec, pipeline_id: str, protected: set[int],
           endpoint: str | None, min_retention_hours: int, dry_run: bool) -> TableVacuum:
    """Iceberg's side of 6.13: expire the snapshots no protected epoch committed (but the
    current one and those younger than the threshold), then delete the data files in the
    table's location that no remaining snapshot references and that are older than the
    threshold (pyiceberg expires snapshots' metadata only and has no orphan-file
    removal, so the deletion is done here, through the library's storage)."""
    import time

    from checkpointing.storage import open_storage

    table = open_table(spec, endpoint)
    horizon_ms = (time.time() - min_retention_hours * 3600) * 1000
    prefix = f"ckpt:{pipeline_id}:"
    current = table.current_snapshot()
    keep, expire = [], []
    for snap in table.snapshots():
        summary = snap.summary
        ours = summary is not None and str(summary.get("ckpt.app_id", "")).startswith(prefix)
        epoch = int(summary.get("ckpt.epoch_id", "0")) if ours else None
        if (epoch in protected or snap.timestamp_ms >= horizon_ms
                or (current is not None and snap.snapshot_id == current.snapshot_id)):
            keep.append(snap)
        else:
            expire.append(snap.snapshot_id)
    referenced = {file_path(task.file.file_path) for snap in keep
                  for task in table.scan(snapshot_id=snap.snapshot_id).plan_files()}
    store = open_storage(spec.location, endpoint_url=endpoint)
    unreferenced = [o for o in store.list("") if o.key.endswith(".parquet")
                    and not o.key.startswith("metadata/")
                    and file_path(store.uri(o.key)) not in referenced]
    doomed = [o.key for o in unreferenced if o.last_modified * 1000 < horizon_ms]
    if not dry_run:
        if expire:
            table.maintenance.expire_snapshots().by_ids(expire).commit()
        for key in doomed:
            store.delete(key)
    kept = tuple(sorted(s.snapshot_id for s in keep
                        if s.summary is not None and s.summary.get("ckpt.epoch_id", "").isdigit()
                        and int(s.summary["ckpt.epoch_id"]) in protected))
    return TableVacuum(output, kept, len(doomed), dry_run, len(unreferenced) - len(doomed),
                       min_retention_hours)


#: Apache Iceberg's implementation, found by :mod:`checkpointing.tables.format_registry`
class IcebergReader:
    """Iceberg's table-input reader (:class:`~checkpointing.tables.table_format.TableReader`):
    the functions above."""

    pin_version = staticmethod(pin_version)
    version_before = staticmethod(version_before)
    committed_version = staticmethod(committed_version)
    schema_at = staticmethod(schema_at)
    log_partition_columns = staticmethod(log_partition_columns)
    read_changes = staticmethod(read_changes)


FORMAT = TableFormat(traits("iceberg"), IcebergCommitter, vacuum, IcebergReader())
