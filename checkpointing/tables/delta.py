"""Delta Lake committer of table outputs (PROTOCOL 6.12), through delta-rs (``deltalake``):
commits from Python without a JVM, whatever Spark mode the jobs run in.

One commit per output and epoch: the epoch's staged files as ``add`` actions (plus
``remove`` actions of the files it replaces), the transaction ``txn(appId, version=epoch)``
and the commit's ``ckpt.app_id``/``ckpt.epoch_id`` metadata (how the version of an epoch is
found again). The commit is tried with no automatic retry: a concurrent commit makes it
fail, and the table is read again, so a racing publish step never commits the same epoch
twice (delta-rs's own retry would re-apply the append on top of the winner's).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:  # the format's libraries are an extra: imported where they are used
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

from checkpointing.extras import require
from checkpointing.json_types import JsonObject
from checkpointing.protocol.state_handle import FileRef
from checkpointing.protocol.table_formats import traits
from checkpointing.protocol.table_inputs import (
    EMPTY,
    WAY_FORWARD,
    ChangeSet,
    DataFile,
    TableInput,
    TableInputError,
    TableVersion,
    check_schema,
)
from checkpointing.storage import Storage
from checkpointing.tables.spec import (
    DELETE_COLUMN,
    TableCommit,
    TableCommitError,
    TableSpec,
    TableVacuum,
    diff_with_table,
    partition_key,
    partition_values,
    read_staged_rows,
    relative_path,
    require_same_partitioning,
)
from checkpointing.tables.table_format import TableFormat

log = logging.getLogger("checkpointing.tables.delta")
_ATTEMPTS = 8
#: Commits between two Delta log checkpoints of a table this library creates (Delta's
#: default is 100): opening a table reads the newest checkpoint and the commits after it,
#: so a commit's and a reader's requests stop growing after this many epochs.
CHECKPOINT_INTERVAL = 10
_HISTORY_SEARCH = 200  # commits searched for the version that holds an epoch's transaction


def commit_metadata(app: str, epoch_id: int) -> dict[str, str]:
    """What an epoch's commit records in its ``commitInfo``: ``ckpt.app_id`` and
    ``ckpt.epoch_id`` (how the version of an epoch is found again), and the same as Delta's
    ``userMetadata``, the commit field Spark's ``DESCRIBE HISTORY`` shows as a column."""
    return {"ckpt.app_id": app, "ckpt.epoch_id": str(epoch_id),
            "userMetadata": json.dumps({"ckpt.app_id": app, "ckpt.epoch_id": epoch_id})}


def _ident(name: str) -> str:
    """A column name quoted for delta-rs's SQL expressions (DataFusion lowercases bare
    identifiers)."""
    return '"' + name.replace('"', '""') + '"'


def table_path(location: str) -> str:
    """What deltalake opens: a plain path for ``file://``, the URI otherwise."""
    return urlparse(location).path if location.startswith("file://") else location


def storage_options(location: str, endpoint_url: str | None) -> dict[str, str]:
    """delta-rs object-store options for ``location``: the S3-compatible endpoint and, so
    that two committers never both write version N, conditional puts (``If-None-Match``),
    which S3 and MinIO honour. Credentials come from the standard AWS environment."""
    if urlparse(location).scheme not in ("s3", "s3a"):
        return {}
    opts = {"AWS_CONDITIONAL_PUT": "etag"}
    if endpoint_url:
        opts["AWS_ENDPOINT_URL"] = endpoint_url
        opts["AWS_ALLOW_HTTP"] = "true" if endpoint_url.startswith("http://") else "false"
        opts.setdefault("AWS_REGION", "us-east-1")
    return opts


def open_table(location: str, endpoint_url: str | None = None,
               version: int | None = None) -> DeltaTable:
    """The Delta table at ``location`` (at ``version``, else the newest), with the
    object-store options this library commits with."""
    from deltalake import DeltaTable

    return DeltaTable(table_path(location), version=version,
                      storage_options=storage_options(location, endpoint_url))


def _same_partitioning(dt: DeltaTable, spec: TableSpec, app: str) -> None:
    """Refuse an output partitioned otherwise than its existing table: delta-rs would commit
    the files under the table's partition columns, and readers would see those columns
    null."""
    require_same_partitioning(list(dt.metadata().partition_columns), spec, app)


class DeltaCommitter:
    """Commits staged files of one epoch to a Delta table, exactly once per epoch."""

    def __init__(self, endpoint_url: str | None = None):
        self.endpoint_url = endpoint_url

    def commit(self, spec: TableSpec, app: str, epoch_id: int, files: tuple[FileRef, ...],
               meta: JsonObject) -> TableCommit:
        require("deltalake", "delta", "a Delta table output")
        from deltalake import Schema
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import CommitProperties, Transaction

        opts = storage_options(spec.location, self.endpoint_url)
        path = table_path(spec.location)
        if "schema" not in meta:
            raise TableCommitError(f"output of table {app!r} has no schema in its state "
                                   "handle (stage it with stage_table_output)")
        schema = Schema.from_json(meta["schema"])
        last: Exception | None = None
        for _ in range(_ATTEMPTS):
            dt = self._open(path, spec, schema, opts)
            done = dt.transaction_version(app)
            if done is not None and done >= epoch_id:
                return TableCommit(self._version_of(dt, app, epoch_id), False)
            if spec.mode == "merge":
                try:
                    version = self._merge(dt, spec, app, epoch_id, files)
                except CommitFailedError as exc:
                    last = exc
                    continue
                log.info("table %s: epoch %d merged as version %d", app, epoch_id, version)
                return TableCommit(version, True)
            # Only here: a merge writes through delta-rs, which partitions as the table is.
            _same_partitioning(dt, spec, app)
            actions = self._actions(dt, spec, app, epoch_id, files, meta)
            props = CommitProperties(
                custom_metadata=commit_metadata(app, epoch_id), max_commit_retries=0,
                app_transactions=[Transaction(app, epoch_id, int(time.time() * 1000))])
            try:
                dt.create_write_transaction(actions, mode="append", schema=schema,
                                            partition_by=list(spec.partition_by) or None,
                                            commit_properties=props)
            except CommitFailedError as exc:  # a concurrent commit won version N: look again
                last = exc
                continue
            except Exception as exc:  # noqa: BLE001 - delta-rs raises plain errors for I/O
                raise TableCommitError(f"commit of epoch {epoch_id} to table {app!r} failed: "
                                       f"{type(exc).__name__}: {str(exc)[:200]}") from None
            # No automatic retry: the commit that succeeded is the version it read plus one.
            version = int(dt.version()) + 1
            log.info("table %s: epoch %d committed as version %d (%d file(s))", app, epoch_id,
                     version, len(files))
            return TableCommit(version, True)
        raise TableCommitError(f"table {app!r}: epoch {epoch_id} not committed after "
                               f"{_ATTEMPTS} concurrent commits ({last})")

    def _merge(self, dt: DeltaTable, spec: TableSpec, app: str, epoch_id: int,
               files: tuple[FileRef, ...]) -> int:
        """A ``merge`` output: the staged rows merged by key in one commit (delta-rs's
        MERGE, copy-on-write: the files holding a changed key are rewritten), carrying the
        epoch's transaction, so the history names it MERGE and the change data feed, when
        on, records its row changes."""
        read = int(dt.version())
        rows = read_staged_rows(spec, files, self.endpoint_url)
        if rows is None or rows.num_rows == 0:  # nothing to merge: the epoch is recorded
            return self._record_only(dt, app, epoch_id)
        cols = [c for c in rows.column_names if c != DELETE_COLUMN]
        # Null-safe: a NULL key (a group of rows whose key is NULL) is one key, as GROUP BY
        # and a database's primary key see it; with `=` every merge would insert it again.
        # (Each in parentheses: DataFusion would read `a IS NOT DISTINCT FROM b AND c` as
        # `a IS NOT DISTINCT FROM (b AND c)`.)
        on = " AND ".join(f"(t.{_ident(k)} IS NOT DISTINCT FROM s.{_ident(k)})"
                          for k in spec.keys)
        values = {_ident(c): f"s.{_ident(c)}" for c in cols}
        deleted = f"s.{_ident(DELETE_COLUMN)}"
        try:
            (dt.merge(rows, on, source_alias="s", target_alias="t",
                      commit_properties=self._props(app, epoch_id))
             .when_matched_delete(predicate=deleted)
             .when_matched_update(updates=values, predicate=f"NOT {deleted}")
             .when_not_matched_insert(updates=values, predicate=f"NOT {deleted}")
             .execute())
        except Exception as exc:  # noqa: BLE001 - delta-rs raises plain errors
            from deltalake.exceptions import CommitFailedError

            if isinstance(exc, CommitFailedError):
                raise
            raise TableCommitError(f"merge of epoch {epoch_id} into table {app!r} failed: "
                                   f"{type(exc).__name__}: {str(exc)[:200]}") from None
        if int(dt.version()) == read:
            # delta-rs commits nothing for a merge that changes no row (deletes of absent
            # keys, unchanged upserts): the epoch still gets its version, so that its
            # transaction is in the log and every epoch maps to one version (6.12).
            return self._record_only(dt, app, epoch_id)
        return int(dt.version())

    def _record_only(self, dt: DeltaTable, app: str, epoch_id: int) -> int:
        """A commit carrying only the epoch's transaction: its version. delta-rs does not
        move ``dt`` to the version a write transaction commits, and the commit is tried
        once, so it is the version read plus one."""
        read = int(dt.version())
        dt.create_write_transaction([], mode="append", schema=dt.schema(),
                                    commit_properties=self._props(app, epoch_id))
        return read + 1

    @staticmethod
    def _props(app: str, epoch_id: int) -> Any:
        from deltalake.transaction import CommitProperties, Transaction

        return CommitProperties(
            custom_metadata=commit_metadata(app, epoch_id), max_commit_retries=0,
            app_transactions=[Transaction(app, epoch_id, int(time.time() * 1000))])

    @staticmethod
    def _open(path: str, spec: TableSpec, schema: pa.Schema,
              opts: dict[str, str]) -> DeltaTable:
        """The table at its newest version, created (version 0: schema, no data) by the
        first epoch that commits to it."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError
        from deltalake.transaction import CommitProperties

        try:
            return DeltaTable(path, storage_options=opts)
        except TableNotFoundError:
            pass
        try:
            # No retry: a creator that loses version 0 must not land its CREATE later, as a
            # version of its own after epochs committed data.
            DeltaTable.create(path, schema=schema, mode="error",
                              partition_by=list(spec.partition_by) or None,
                              configuration={"delta.checkpointInterval":
                                             str(CHECKPOINT_INTERVAL),
                                             **({"delta.enableChangeDataFeed": "true"}
                                                if spec.change_data_feed else {})},
                              storage_options=opts,
                              commit_properties=CommitProperties(max_commit_retries=0))
        except (DeltaError, ValueError, OSError) as exc:  # created concurrently
            log.info("table at its location was created concurrently (%s)",
                     type(exc).__name__)
        return DeltaTable(path, storage_options=opts)

    def _actions(self, dt: DeltaTable, spec: TableSpec, app: str, epoch_id: int,
                 files: tuple[FileRef, ...], meta: JsonObject,
                 ) -> list[AddAction | RemoveAction]:
        """The epoch's ``add`` and ``remove`` actions. An output listing the table's whole
        content (``table_files: all``, 1.8) is committed as the difference between the
        table's current files and that list, whatever moved the table since the epoch
        restored (a backfill's promotion replaces exactly what it recomputed); an
        ``append`` output adds its files."""
        records = meta.get("records") or {}
        if meta.get("table_files") != "all":
            return self._adds(spec, files, records) + self._removes(dt, spec, files)
        import pyarrow as pa
        from deltalake.transaction import RemoveAction

        current = {row["path"]: row for row in
                   pa.table(dt.get_add_actions(flatten=True)).to_pylist()}
        adds, removes = diff_with_table(spec, app, epoch_id, files, current,
                                        lambda f: relative_path(spec, f), self.endpoint_url)
        now = int(time.time() * 1000)
        return (self._adds(spec, tuple(adds), records)
                + [RemoveAction(path, True, now, current[path].get("size_bytes"))
                   for path in removes])

    @staticmethod
    def _adds(spec: TableSpec, files: tuple[FileRef, ...],
              records: dict[str, int]) -> list[AddAction]:
        from deltalake.transaction import AddAction

        now = int(time.time() * 1000)
        adds = []
        for ref in files:
            rel = relative_path(spec, ref)
            stats = json.dumps({"numRecords": records[ref.uri]}) if ref.uri in records else ""
            adds.append(AddAction(rel, ref.size, partition_values(spec, rel), now, True, stats))
        return adds

    @staticmethod
    def _removes(dt: DeltaTable, spec: TableSpec,
                 files: tuple[FileRef, ...]) -> list[RemoveAction]:
        """``remove`` actions of what the epoch replaces: every file (overwrite), or those
        of the partitions it wrote (replace_partitions); none for append."""
        import pyarrow as pa
        from deltalake.transaction import RemoveAction

        if spec.mode == "append":
            return []
        current = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
        if spec.mode == "replace_partitions":
            written = {partition_key(spec, f) for f in files}
            current = [row for row in current
                       if tuple(row.get(f"partition.{c}") for c in spec.partition_by)
                       in written]
        now = int(time.time() * 1000)
        return [RemoveAction(row["path"], True, now, row.get("size_bytes"))
                for row in current]

    @staticmethod
    def _version_of(dt: DeltaTable, app: str, epoch_id: int) -> int:
        for commit in dt.history(_HISTORY_SEARCH):
            if commit.get("ckpt.app_id") == app and commit.get("ckpt.epoch_id") == str(epoch_id):
                return int(commit["version"])
        # Committed by a writer that left no metadata, or more than _HISTORY_SEARCH commits
        # ago: the transaction stands; the newest version is the best known.
        return int(dt.version())


# ---------------------------------------------------------------------- table inputs
# A Delta table as an incremental input (PROTOCOL 6.14): the newest version pins the epoch;
# the change of (start, end] is read from the commits of that range, each one JSON document
# of actions in ``_delta_log``, so that finding it costs what changed, not the table.

#: reader features whose tables a change set reads: deletion vectors (rows selected by
#: their keep masks), column mapping (columns read by physical name), and those that change
#: nothing in how data files are read. Any other is refused, naming it.
_READABLE_FEATURES = frozenset({"deletionVectors", "columnMapping", "timestampNtz",
                                "v2Checkpoint", "vacuumProtocolCheck"})


def ensure_created(spec: TableSpec, schema_json: str, endpoint_url: str | None = None) -> int:
    """Create the table (version 0: its schema, no data) unless it exists, as its first
    commit would; returns its newest version. A table registered under a catalog name
    before its first epoch completes needs a log for the catalog to point at."""
    require("deltalake", "delta", "a Delta table output")
    from deltalake import Schema

    opts = storage_options(spec.location, endpoint_url)
    dt = DeltaCommitter._open(table_path(spec.location), spec, Schema.from_json(schema_json),
                              opts)
    return int(dt.version())


def _location(spec: TableInput) -> str:
    """A Delta input's location (its declaration refuses one without)."""
    if not spec.location:
        raise TableInputError(f"table input {spec.label!r}: a Delta table input needs its "
                              "location")
    return spec.location


def _input_table(spec: TableInput, endpoint_url: str | None,
                 version: int | None = None) -> DeltaTable:
    from deltalake.exceptions import TableNotFoundError


    require("deltalake", "delta", "a Delta table input")
    try:
        return open_table(_location(spec), endpoint_url, version)
    except TableNotFoundError:
        raise TableInputError(f"table input {spec.label!r}: no Delta table at its location"
                              + (f" at version {version}" if version is not None else "")
                              ) from None


def pin_version(spec: TableInput, endpoint_url: str | None) -> TableVersion:
    """The table's newest version (the barrier's pin)."""

    return TableVersion(int(_input_table(spec, endpoint_url).version()))


def committed_version(spec: TableInput, committed: int,
                      endpoint_url: str | None) -> TableVersion:
    """A table version this library committed, as a reader's version."""
    return TableVersion(committed)


def version_before(spec: TableInput, version: int, endpoint_url: str | None) -> TableVersion:
    """The version a ``starting_version`` read begins after."""

    return EMPTY if version == 0 else TableVersion(version - 1)


def _arrow_schema(dt: DeltaTable) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(dt.schema().to_arrow())


def schema_at(spec: TableInput, version: TableVersion, endpoint_url: str | None) -> pa.Schema:
    return _arrow_schema(_input_table(spec, endpoint_url, version.version))


def log_partition_columns(spec: TableInput, version: TableVersion,
                          endpoint_url: str | None) -> list[str]:
    return list(_input_table(spec, endpoint_url, version.version).metadata().partition_columns)


def _check_features(spec: TableInput, dt: DeltaTable) -> None:
    unknown = sorted(set(dt.protocol().reader_features or ()) - _READABLE_FEATURES)
    if unknown:
        raise TableInputError(
            f"table input {spec.label!r}: the table uses the Delta reader feature(s) "
            f"{', '.join(map(repr, unknown))}, which table inputs do not read; read it "
            "whole with run.table_snapshot, or disable the feature on the upstream table")


def _physical_names(dt: DeltaTable) -> dict[str, str]:
    """Each column's name in the data files under column mapping (``name`` or ``id``
    mode), where it differs from the table's; empty for a table without it."""
    mode = (dt.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
    if mode == "none":
        return {}
    out = {}
    for f in dt.schema().fields:
        physical = (f.metadata or {}).get("delta.columnMapping.physicalName")
        if physical and physical != f.name:
            out[f.name] = str(physical)
    return out


def _physical_schema(dt: DeltaTable) -> pa.Schema:
    """The table's schema with the files' column names: what a rename keeps."""
    import pyarrow as pa

    names = _physical_names(dt)
    schema = _arrow_schema(dt)
    return pa.schema([f.with_name(names.get(f.name, f.name)) for f in schema])


def _deleted_rows(dt: DeltaTable) -> dict[str, Any]:
    """The rows deletion vectors delete at ``dt``'s version, by data file (its path
    relative to the table, as the log names it): positions in the file, from delta-rs's
    keep masks. Files without a deletion vector are not listed."""
    import numpy as np
    import pyarrow as pa

    if "deletionVectors" not in set(dt.protocol().reader_features or ()):
        return {}  # no file of it can have one (and delta-rs is not asked to look)
    masks = pa.table(dt.deletion_vectors())
    if not masks.num_rows:
        return {}
    root = unquote(dt.table_uri).rstrip("/") + "/"
    out: dict[str, Any] = {}
    vectors = masks.column("selection_vector")
    for i, uri in enumerate(masks.column("filepath").to_pylist()):
        keep = vectors[i].values.to_numpy(zero_copy_only=False)
        path = unquote(uri)
        out[path[len(root):] if path.startswith(root) else path] = np.flatnonzero(~keep)
    return out


def _dv_key(action: JsonObject) -> str:
    """A deletion vector's identity (Delta: storage type, path or inline bytes, offset):
    a file in the table is the pair (path, this)."""
    dv = action.get("deletionVector")
    if not isinstance(dv, dict):
        return ""
    return f"{dv.get('storageType')}:{dv.get('pathOrInlineDv')}@{dv.get('offset')}"


def read_changes(spec: TableInput, start: TableVersion | None, end: TableVersion,
                 endpoint_url: str | None) -> ChangeSet:
    """The change set of (``start``, ``end``]: the whole table at ``end`` when ``start`` is
    None, else the signed sum of what the commits ``start+1 .. end`` did to the table's rows.

    A row of a Delta table is a position in a data file, and a file in the table is the pair
    (path, deletion vector): an ``add`` with ``dataChange: true`` adds that file's rows less
    those its vector deletes, a ``remove`` retracts them. Each action is one signed term;
    a term and its opposite (the same path and vector) cancel whatever lies between them,
    and each vector that remains is resolved at a version where its pair is live (an add's
    own version, the version before a remove), never at ``end``, where a later OPTIMIZE or
    PURGE may have compacted the file away. Actions with ``dataChange: false`` (OPTIMIZE,
    Z-ORDER, REORG PURGE) move the same rows into other files: they are no term. So the sum
    equals the content at ``end`` less the content at ``start``, whatever sequence of
    commits lies between (PROTOCOL 6.14, "Change sets")."""
    import pyarrow as pa

    from checkpointing.storage import open_storage

    store = open_storage(_location(spec), endpoint_url=endpoint_url)
    # The commits of the range first: one missing (log retention) is the refusal to name,
    # before delta-rs fails to load the version without it.
    bodies = {} if start is None or start.version < 0 else \
        {v: _commit(spec, store, v) for v in range(start.version + 1, end.version + 1)}
    versions = _Versions(spec, endpoint_url)
    dt_end = versions.at(end.version)
    _check_features(spec, dt_end)
    schema = _arrow_schema(dt_end)
    parts = tuple(dt_end.metadata().partition_columns)
    physical = _physical_names(dt_end)

    def data_file(path: str, size: int | None, values: JsonObject | None,
                  records: int | None = None) -> DataFile:
        rel = unquote(path)
        uri = rel if "://" in rel else store.uri(rel)
        values = dict(values or {})  # keyed by physical name under column mapping
        # only the values the action gives: a remove without them (delta-rs writes such)
        # is completed from the table where the file is live (_with_partitions)
        keys = {c: next((k for k in (physical.get(c, c), c) if k in values), None)
                for c in parts}
        logical = {c: values[k] for c, k in keys.items() if k is not None}
        return DataFile(uri, int(size or 0), logical if parts else values, records)

    if start is None or start.version < 0:  # from the empty table: its content at end
        rows = pa.table(dt_end.get_add_actions(flatten=True)).to_pylist()
        deleted = _vectors_at(spec, dt_end, end.version)
        added = tuple(_skipping(data_file(
            r["path"], r.get("size_bytes"),
            {c: r.get(f"partition.{c}", r.get(f"partition.{physical.get(c, c)}"))
             for c in parts}, r.get("num_records")), deleted.get(unquote(r["path"])))
            for r in rows)
        return ChangeSet(start, end, added, (), schema, parts, 1, physical)
    terms: dict[tuple[str, str], _Term] = {}
    schema_checked = False
    renamed: dict[str, tuple[str, int]] = {}
    for version, body in bodies.items():
        for line in body.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action and action["add"].get("dataChange", True):
                a = action["add"]
                stats = json.loads(a["stats"]) if a.get("stats") else {}
                _count(terms, (a["path"], _dv_key(a)), +1, version, data_file(
                    a["path"], a.get("size"), a.get("partitionValues"),
                    stats.get("numRecords")))
            elif "remove" in action and action["remove"].get("dataChange", True):
                r = action["remove"]
                _count(terms, (r["path"], _dv_key(r)), -1, version - 1,
                       data_file(r["path"], r.get("size"), r.get("partitionValues")))
            elif "metaData" in action and not schema_checked:
                renamed = _check_schema_change(spec, versions.at(start.version), dt_end,
                                               version)
                schema_checked = True
    live = {k: t for k, t in terms.items() if t.count}
    added_files, removed_files = _net_of_vectors(spec, live, versions)
    removed = _with_partitions(removed_files, live, parts, versions)
    _require_present(spec, store, start, added_files, removed)
    return ChangeSet(start, end, added_files, removed, schema, parts,
                     end.version - start.version, physical, renamed)


class _Versions:
    """The input table opened at each version one change-set read needs, each once."""

    def __init__(self, spec: TableInput, endpoint_url: str | None):
        self.spec, self.endpoint_url = spec, endpoint_url
        self._open: dict[int, DeltaTable] = {}

    def at(self, version: int) -> DeltaTable:
        if version not in self._open:
            self._open[version] = _input_table(self.spec, self.endpoint_url, version)
        return self._open[version]


@dataclass
class _Term:
    """One (path, deletion vector) pair of a range: its net count (+1 added, -1 removed,
    0 cancelled) and a version where the pair is live, where its vector is resolved."""

    count: int
    live: int
    file: DataFile


def _count(terms: dict[tuple[str, str], _Term], key: tuple[str, str], sign: int,
           live: int, file: DataFile) -> None:
    t = terms.get(key)
    if t is None:
        terms[key] = _Term(sign, live, file)
        return
    t.count += sign
    t.live = live
    if sign > 0:  # an add's action carries the file's statistics
        t.file = file


def _vectors_at(spec: TableInput, dt: DeltaTable, version: int) -> dict[str, Any]:
    """:func:`_deleted_rows` at ``version``, a vector file deleted (VACUUM) refused in one
    line: its rows cannot be told apart."""
    try:
        return _deleted_rows(dt)
    except Exception as exc:  # noqa: BLE001 - delta-rs raises plain errors for I/O
        if "not found" not in str(exc).lower():
            raise
        raise TableInputError(
            f"table input {spec.label!r}: a deletion vector of version {version} was "
            "already deleted by the table's VACUUM, so the rows it deletes cannot be told "
            f"apart; {WAY_FORWARD}") from None


def _require_present(spec: TableInput, store: Storage, start: TableVersion,
                     added: tuple[DataFile, ...], removed: tuple[DataFile, ...]) -> None:
    """Every data file the change set reads still exists: a file added or removed after
    ``start`` and since compacted and vacuumed has rows no one can read again."""
    gone = [f for f in (*added, *removed)
            if not store.exists(store.key_for_uri(f.uri) or "")]
    if gone:
        raise TableInputError(
            f"table input {spec.label!r}: {len(gone)} file(s) added or removed after version "
            f"{start.version} were already deleted by the table's VACUUM, so their rows "
            f"cannot be read; {WAY_FORWARD}")


def _check_schema_change(spec: TableInput, dt_start: DeltaTable, dt_end: DeltaTable,
                         version: int) -> dict[str, tuple[str, int]]:
    """Refuse a schema change from ``dt_start`` to ``dt_end`` that is not an added column
    (first changed at ``version``); under column mapping, columns are compared by their
    files' names, so a rename is no change and a drop no refusal. Returns the renames
    (old name -> new name and ``version``)."""
    if not _physical_names(dt_end):
        check_schema(spec.label, _arrow_schema(dt_start), _arrow_schema(dt_end), version)
        return {}
    check_schema(spec.label, _physical_schema(dt_start), _physical_schema(dt_end), version,
                 drops_allowed=True)
    old, new = ({names.get(f.name, f.name): f.name for f in dt.schema().fields}
                for dt, names in ((dt_start, _physical_names(dt_start)),
                                  (dt_end, _physical_names(dt_end))))
    return {old[k]: (new[k], version) for k in old.keys() & new.keys() if old[k] != new[k]}


def _skipping(f: DataFile, deleted: Any) -> DataFile:
    import dataclasses

    if deleted is None or not len(deleted):
        return f
    return dataclasses.replace(f, skip_rows=tuple(int(i) for i in deleted))


def _net_of_vectors(spec: TableInput, live: dict[tuple[str, str], _Term], versions: _Versions
                    ) -> tuple[tuple[DataFile, ...], list[tuple[str, DataFile]]]:
    """The added files and the removed ones (with their paths in the log) with the rows
    that count. Each term's vector is read at the term's own live version. A path with one
    added and one removed term (a DELETE, UPDATE or MERGE that wrote a deletion vector; a
    RESTORE) is one file whose vector changed: it yields the rows deleted in between
    (retracted) and those no longer deleted (added); any other term yields the file's rows
    less its vector's."""
    import dataclasses

    import numpy as np

    vectors = {v: _vectors_at(spec, versions.at(v), v)
               for v in sorted({t.live for (_, dv), t in live.items() if dv})}

    def rows_of(key: tuple[str, str], t: _Term) -> Any:
        path, dv = key
        if not dv:
            return np.array([], dtype=np.int64)
        found = vectors[t.live].get(unquote(path))
        if found is None:  # a vector the log names and delta-rs does not list: never guess
            raise TableInputError(
                f"table input {spec.label!r}: the deletion vector of a file live at version "
                f"{t.live} cannot be read; {WAY_FORWARD}")
        return found

    by_path: dict[str, list[tuple[tuple[str, str], _Term]]] = {}
    for key, t in live.items():
        by_path.setdefault(key[0], []).append((key, t))
    added: list[DataFile] = []
    removed: list[tuple[str, DataFile]] = []
    for path, entries in by_path.items():
        plus = [(k, t) for k, t in entries if t.count > 0]
        minus = [(k, t) for k, t in entries if t.count < 0]
        if len(plus) == 1 and len(minus) == 1 and plus[0][1].count == 1 \
                and minus[0][1].count == -1:
            before, after = rows_of(*minus[0]), rows_of(*plus[0])
            gone = np.setdiff1d(after, before)  # deleted in between: retract
            back = np.setdiff1d(before, after)  # deleted no more: add
            if len(gone):  # (the remove action has no statistics: the add's row count)
                removed.append((path, dataclasses.replace(
                    minus[0][1].file, only_rows=tuple(int(i) for i in gone),
                    records=minus[0][1].file.records or plus[0][1].file.records)))
            if len(back):
                added.append(dataclasses.replace(plus[0][1].file,
                                                 only_rows=tuple(int(i) for i in back)))
            continue
        for key, t in entries:
            f = _skipping(t.file, rows_of(key, t))
            if t.count > 0:
                added.extend([f] * t.count)
            else:
                removed.extend([(path, f)] * -t.count)
    return tuple(added), removed


def _commit(spec: TableInput, store: Storage, version: int) -> bytes:

    body = store.read_optional(f"_delta_log/{version:020d}.json")
    if body is None:
        raise TableInputError(
            f"table input {spec.label!r}: version {version} is no longer in the table's log "
            "(removed by its log retention); the changes since the version the parent epoch "
            f"consumed cannot be read: {WAY_FORWARD}")
    return body


def _with_partitions(removes: list[tuple[str, DataFile]], live: dict[tuple[str, str], _Term],
                     parts: tuple[str, ...], versions: _Versions) -> tuple[DataFile, ...]:
    """Removed files with their partition values: from the ``remove`` actions, or, for a
    writer that left them out, from the table at the version before the file's removal."""
    import dataclasses

    import pyarrow as pa

    if not parts or all(f.partition_values for _, f in removes):
        return tuple(f for _, f in removes)
    at = {p: t.live for (p, _), t in live.items() if t.count < 0}
    tables: dict[int, dict[str, Any]] = {}
    out = []
    for path, f in removes:
        if not f.partition_values and path in at:
            v = at[path]
            if v not in tables:
                tables[v] = {r["path"]: r for r in pa.table(
                    versions.at(v).get_add_actions(flatten=True)).to_pylist()}
            row = tables[v].get(path)
            if row is not None:
                f = dataclasses.replace(f, partition_values={c: row.get(f"partition.{c}")
                                                             for c in parts},
                                        size=f.size or int(row.get("size_bytes") or 0))
        out.append(f)
    return tuple(out)


# ---------------------------------------------------------------------- VACUUM (6.13)

def vacuum(output: str, spec: TableSpec, pipeline_id: str, protected: set[int],
           endpoint: str | None, min_retention_hours: int, dry_run: bool) -> TableVacuum:
    """Delta's side of PROTOCOL 6.13: VACUUM keeping the versions protected epochs
    committed (found by their commits' ``ckpt.epoch_id``), ``full`` so that files no
    version references (staged by aborted attempts) go too once older than the threshold."""
    from checkpointing.storage import open_storage

    dt = open_table(spec.location, endpoint)
    prefix = f"ckpt:{pipeline_id}:"
    keep = sorted({int(c["version"]) for c in dt.history()
                   if str(c.get("ckpt.app_id", "")).startswith(prefix)
                   and c.get("ckpt.epoch_id", "").isdigit()
                   and int(c["ckpt.epoch_id"]) in protected})
    # full: also files no version references (staged by aborted attempts), once older
    # than the threshold; the threshold may be below Delta's own default on purpose.
    def run(dry: bool, hours: int) -> list[str]:
        return dt.vacuum(retention_hours=hours, dry_run=dry, enforce_retention_duration=False,
                         full=True, keep_versions=keep)

    # delta-rs lists a removed file again while its tombstone is in the log, deleted or
    # not: count the candidates that still exist.
    store = open_storage(spec.location, endpoint_url=endpoint)
    # Every unreferenced file (no threshold), each checked once; those past the threshold
    # are what VACUUM deletes, the others it keeps for being recent.
    unreferenced = {p for p in run(True, 0) if store.exists(unquote(p))}
    present = [p for p in run(True, min_retention_hours) if p in unreferenced]
    if present and not dry_run:
        run(False, min_retention_hours)
    return TableVacuum(output, tuple(keep), len(present), dry_run,
                       len(unreferenced) - len(present), min_retention_hours)


#: Delta Lake's implementation, found by :mod:`checkpointing.tables.format_registry`
class DeltaReader:
    """Delta's table-input reader (:class:`~checkpointing.tables.table_format.TableReader`):
    the functions above."""

    pin_version = staticmethod(pin_version)
    version_before = staticmethod(version_before)
    committed_version = staticmethod(committed_version)
    schema_at = staticmethod(schema_at)
    log_partition_columns = staticmethod(log_partition_columns)
    read_changes = staticmethod(read_changes)


FORMAT = TableFormat(traits("delta"), DeltaCommitter, vacuum, DeltaReader())
