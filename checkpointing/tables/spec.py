"""Published outputs as tables (PROTOCOL 6.12): a completed epoch is a table commit.

Flink's two-phase-commit sinks write data files that readers cannot see (phase one) and
commit them when the checkpoint completes (phase two), with the checkpoint id as the
idempotence key: the Iceberg sink's ``flink.max-committed-checkpoint-id``, Delta's ``txn``
action. Here a task stages an output's Parquet files into the table's own location, where
the table's log does not reference them yet (readers ignore them); when the epoch
completes, the publish step commits them in one table commit per output, carrying the
transaction ``(app_id, epoch id)``. A publish step that runs again, or two that race, find
the transaction version already at the epoch and commit nothing: one table version per
epoch. Nothing is copied or rewritten to commit it.

The declaration (:class:`TableSpec`) is format-neutral; each format's committer lives in a
module of its own, reached through :mod:`.table_commit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

from checkpointing.errors import CheckpointError
from checkpointing.json_types import JsonObject
from checkpointing.protocol.state_handle import FileRef
from checkpointing.protocol.table_formats import SPARK_CATALOG_NAME, traits

if TYPE_CHECKING:  # pyarrow comes with the table extras: imported where it is used
    import pyarrow as pa


#: How an epoch changes the table: ``append`` its rows (facts), ``overwrite`` the whole
#: table (a running aggregate republished in full), ``replace_partitions`` the partitions
#: the epoch wrote (changed days), leaving the others as they are, ``merge`` its rows by
#: key (upserts, and deletes of the keys it names: a silver table kept in step).
MODES = ("append", "overwrite", "replace_partitions", "merge")
#: the column a ``merge`` output's staged rows carry: true for a key to delete
DELETE_COLUMN = "_ckpt_delete"


class TableCommitError(CheckpointError):
    """A table output could not be committed (the epoch stays completed; the publish step
    is retried, and commits at most once)."""


@dataclass(frozen=True)
class TableSpec:
    """An output declared as a table: where it lives and how an epoch changes it."""

    location: str
    mode: str = "append"
    partition_by: tuple[str, ...] = ()
    format: str = "delta"
    #: Iceberg: the table's identifier in its catalog (``namespace.table``). Delta
    #: (optional): the name the table is registered under in Spark's session catalog
    #: (``schema.table``), found by ``spark.table(name)`` and SQL in any session over the
    #: same metastore (spark_jobs.runtime.catalog)
    name: str | None = None
    #: Iceberg: the catalog's name; its properties (type, uri, warehouse, s3.*) come from
    #: pyiceberg's own configuration (``PYICEBERG_CATALOG__<NAME>__*`` or .pyiceberg.yaml),
    #: so that no connection string or secret is written into a state handle
    catalog: str = "default"
    #: ``merge``: the columns that identify a row (the merge condition)
    keys: tuple[str, ...] = ()
    #: Delta: created with the change data feed on (``delta.enableChangeDataFeed``), so
    #: that readers of the table's changes (Spark's CDF) see each merge's row changes
    change_data_feed: bool = False

    def __post_init__(self) -> None:
        if traits(self.format).catalog_named and (not self.name or "." not in self.name):
            raise ValueError(f"a {self.format} table needs name='namespace.table' (its "
                             "identifier in the catalog)")
        if (self.name is not None and traits(self.format).spark_catalog_named
                and not SPARK_CATALOG_NAME.fullmatch(self.name)):
            # Spark's built-in catalog has one level of schemas, and the name goes into SQL.
            raise ValueError(f"a {self.format} table's name {self.name!r} must be "
                             "'schema.table' (letters, digits and '_')")
        if self.mode not in MODES:
            raise ValueError(f"table mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.mode == "replace_partitions" and not self.partition_by:
            raise ValueError("mode replace_partitions needs partition_by")
        if (self.mode == "merge") != bool(self.keys):
            raise ValueError("mode merge needs keys=(column, ...), and only merge takes keys")
        if not self.location.strip() or self.location != self.location.rstrip("/"):
            raise ValueError(f"table location {self.location!r} must be a URI without a "
                             "trailing '/'")

    def to_json(self) -> JsonObject:
        d: JsonObject = {"location": self.location, "mode": self.mode,
             "partition_by": list(self.partition_by), "format": self.format}
        if traits(self.format).catalog_named:
            d.update(name=self.name, catalog=self.catalog)
        elif self.name:
            d["name"] = self.name  # Delta: its name in Spark's session catalog (1.18)
        if self.keys:
            d["keys"] = list(self.keys)
        if self.change_data_feed:
            d["change_data_feed"] = True
        return d

    @classmethod
    def from_json(cls, d: JsonObject) -> TableSpec:
        return cls(d["location"], d.get("mode", "append"), tuple(d.get("partition_by") or ()),
                   d.get("format", "delta"), d.get("name"), d.get("catalog", "default"),
                   tuple(d.get("keys") or ()), bool(d.get("change_data_feed", False)))

    @property
    def partition_dir_prefix(self) -> str:
        """How a partition column's directory is named (``<prefix><column>=<value>``):
        Delta keeps partition values in the log, so its files leave the column out and the
        directory carries it; Iceberg reads them from the files' own statistics, so the
        files keep the column and the directory is only a grouping (``p_<column>=``)."""
        return traits(self.format).partition_dir_prefix


def staged_epoch_prefix(pipeline_id: str, epoch_id: int) -> str:
    """The name every staged directory of an epoch's attempts starts with."""
    return f"ckpt-{pipeline_id}-e{epoch_id:010d}-"


def staged_dir(pipeline_id: str, epoch_id: int, task_id: str, attempt: int) -> str:
    """Where, inside a table's location, one attempt stages its files (PROTOCOL 6.12): a
    directory the table's log references only once the epoch's commit adds its files."""
    return f"{staged_epoch_prefix(pipeline_id, epoch_id)}{task_id}-a{attempt:04d}"


def table_schema_json(arrow_schema: pa.Schema, spec: TableSpec) -> str:
    """The schema of a table output as its format's committer needs it: Delta's JSON
    schema (the data's Arrow schema, plus any partition column the files do not hold as a
    string column: Spark's partitioned writes leave them out, the log carries their
    values); for Iceberg, the Arrow schema itself (IPC, base64)."""
    import pyarrow as pa

    if DELETE_COLUMN in arrow_schema.names:  # a merge output's marker, not the table's
        arrow_schema = arrow_schema.remove(arrow_schema.get_field_index(DELETE_COLUMN))
    if traits(spec.format).schema_encoding == "arrow-ipc":
        import base64

        return base64.b64encode(arrow_schema.serialize().to_pybytes()).decode()
    from deltalake import Schema

    for col in spec.partition_by:
        if col not in arrow_schema.names:
            arrow_schema = arrow_schema.append(pa.field(col, pa.string()))
    return Schema.from_arrow(arrow_schema).to_json()


def require_same_partitioning(have: list[str], spec: TableSpec, app: str) -> None:
    """Refuse an output whose partition columns are not its existing table's ``have``."""
    if have != list(spec.partition_by):
        raise TableCommitError(
            f"table {app!r} is partitioned by {have or 'nothing'}, its output by "
            f"{list(spec.partition_by) or 'nothing'}: write the output as the table is "
            "partitioned, or move the table aside to recreate it")


def relative_path(spec: TableSpec, ref: FileRef) -> str:
    """A staged file's path inside the table (the ``add`` action's path)."""
    root = unquote(spec.location.replace("s3a://", "s3://")) + "/"
    uri = unquote(ref.uri.replace("s3a://", "s3://"))
    if not uri.startswith(root):
        raise TableCommitError(f"output file {ref.name!r} is not inside its table's location "
                               "(stage table outputs with stage_table_output)")
    # A local store's URIs are percent-encoded ("day%3Dd1"); the log holds the plain
    # relative path, as Spark's writers put it there ("day=d1/part-0.parquet").
    return uri[len(root):]


def partition_values(spec: TableSpec, path: str) -> dict[str, str | None]:
    """The partition values of a file from its ``col=value`` directories."""
    found = {}
    for seg in path.split("/")[:-1]:
        key, sep, value = seg.partition("=")
        key = key.removeprefix(spec.partition_dir_prefix)
        if sep and key in spec.partition_by:
            value = unquote(value)
            found[key] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
    missing = [c for c in spec.partition_by if c not in found]
    if missing:
        raise TableCommitError(f"file {path!r} has no partition directory for {missing}")
    return found


def partition_key(spec: TableSpec, ref: FileRef) -> tuple[str | None, ...]:
    """The partition (values of ``spec.partition_by``, in order) a table file belongs to."""
    values = partition_values(spec, relative_path(spec, ref))
    return tuple(values.get(c) for c in spec.partition_by)


def is_staged_by(spec: TableSpec, ref: FileRef, pipeline_id: str, epoch_id: int) -> bool:
    """Whether ``ref`` was staged by an attempt of epoch ``epoch_id`` (not carried)."""
    return relative_path(spec, ref).startswith(staged_epoch_prefix(pipeline_id, epoch_id))


def diff_with_table(spec: TableSpec, app: str, epoch_id: int, files: tuple[FileRef, ...],
                    current: Any, key: Callable[[FileRef], str],
                    endpoint_url: str | None = None) -> tuple[list[FileRef], list[str]]:
    """What committing an output that lists the table's whole content (``table_files:
    all``, 1.8) changes, whatever moved the table since its epoch restored: (the listed
    files the table lacks, the table's files not listed). ``current`` holds the table's
    files as ``key`` names them. A listed file the epoch did not stage and the table no
    longer references must still exist (6.13): else the commit is refused."""
    wanted = {key(f): f for f in files}
    adds = [f for k, f in wanted.items() if k not in current]
    pipeline = app.split(":")[1]
    check_present(spec, [f for f in adds if not is_staged_by(spec, f, pipeline, epoch_id)],
                  app, epoch_id, endpoint_url)
    return adds, [k for k in current if k not in wanted]


def check_present(spec: TableSpec, refs: list[FileRef], app: str, epoch_id: int,
                  endpoint_url: str | None = None) -> None:
    """Refuse, in one line, to commit files a cleanup that ignored the retained epochs
    (6.13) deleted: the table would name files no reader can open."""
    if not refs:
        return
    from checkpointing.storage import open_storage

    store = open_storage(spec.location, endpoint_url=endpoint_url)
    gone = [f.name for f in refs
            if not store.exists(store.key_for_uri(f.uri.replace("s3a://", "s3://")) or "")]
    if gone:
        raise TableCommitError(
            f"table {app!r}: epoch {epoch_id} keeps {len(gone)} file(s) the table's cleanup "
            f"already deleted (first: {gone[0]!r}); clean up with 'ckpt tables vacuum', "
            "which keeps what retained epochs and savepoints reference")


def read_staged_rows(spec: TableSpec, files: tuple[FileRef, ...],
                     endpoint_url: str | None = None) -> Any:
    """The rows of a ``merge`` output's staged files (its change: upserts and deletes),
    one Arrow table; read through the table's storage, never listed."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from checkpointing.storage import open_storage

    store = open_storage(spec.location, endpoint_url=endpoint_url)
    tables = []
    for ref in files:
        key = store.key_for_uri(ref.uri.replace("s3a://", "s3://"))
        if key is None:
            raise TableCommitError(f"staged file {ref.name!r} is not inside its table's "
                                   "location")
        tables.append(pq.read_table(io.BytesIO(store.read(key)[0])))
    return pa.concat_tables(tables, promote_options="default") if tables else None


def app_id(pipeline_id: str, lineage: str, output: str) -> str:
    """The transaction's application id of one output of one lineage (PROTOCOL 6.12)."""
    return f"ckpt:{pipeline_id}:{lineage}:{output}"


@dataclass(frozen=True)
class TableVacuum:
    """What VACUUM did (or, ``dry_run``, would do) to one table output (PROTOCOL 6.13)."""

    output: str
    kept_versions: tuple[int, ...]
    files_deleted: int
    dry_run: bool
    #: files no kept version references, left because they are younger than the threshold
    #: (an epoch in flight may still commit them)
    recent_kept: int = 0
    min_retention_hours: int | None = None

    def describe(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        kept = ", ".join(f"v{v}" for v in self.kept_versions) or "none"
        recent = (f"; {self.recent_kept} unreferenced file(s) younger than "
                  f"{self.min_retention_hours} h kept" if self.recent_kept else "")
        return (f"{self.output}: {verb} {self.files_deleted} file(s){recent}; versions kept "
                f"for retained epochs and savepoints: {kept}")


@dataclass(frozen=True)
class TableCommit:
    """The table version holding an epoch's output, and whether this call committed it
    (False: an earlier publish step had, found by its transaction)."""

    version: int
    committed: bool


class TableCommitter(Protocol):
    def commit(self, spec: TableSpec, app: str, epoch_id: int, files: tuple[FileRef, ...],
               meta: JsonObject) -> TableCommit: ...
