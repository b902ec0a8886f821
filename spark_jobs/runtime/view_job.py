"""The job of a view task: one epoch of an incremental view (:mod:`checkpointing.ivm`), its
operators' states kept as the task's checkpointed state, its output committed as one table
version by the epoch's completion.

Each epoch: read every table input's change (pinned by the barrier), plan the query over
the inputs' schemas, let the refresh planner choose (:mod:`checkpointing.ivm.refresh`),
then

- incremental: the inputs' signed changes through the plan's rules; the states of the
  previous epoch read back from its handle, the next ones written (changed files only);
  an epoch with no change carries every state file by reference, with no Spark job;
- full: the view recomputed from the inputs at their pinned versions (the plan's rules
  from empty states when there is a plan, so that the next epoch maintains it; the query
  itself when there is none).

The view's whole result is kept too (a Z-set, its rows with their counts): a full refresh
subtracts it to find what changed, verification compares with it. So is the epoch's change
of the view (``view/change/``): the output is staged from it, and a view over this one, in
the same DAG, reads it as its input's change instead of this view's table. The output is a keyed
merge of the changed rows when rows have a key (the GROUP BY columns, or declared ones);
without a key, the rows the epoch added when it removed none, the table's files kept by
reference, else the whole result, overwritten."""

# ruff: noqa: S608 - SQL over the task's own relations: identifiers quoted by q(), no value
# from outside the query is pasted in.
from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checkpointing.ivm.maintain import run_epoch
from checkpointing.ivm.operators import WEIGHT
from checkpointing.ivm.planner import ViewQueryError, plan_view
from checkpointing.ivm.refresh import (
    InputChange,
    Refresh,
    RefreshCosts,
    ViewRecord,
    choose,
    query_id,
)
from checkpointing.ivm.rules import consolidated, input_relation, program, q
from checkpointing.protocol.file_inputs import FileInput
from checkpointing.protocol.view_task import ViewTask
from checkpointing.tables.spec import TableSpec

from .errors import DeclineEpoch, JobResultError
from .session import spark_uri
from .views import SparkEngine, due

if TYPE_CHECKING:
    from .job_run import JobResult, JobRun

#: the state directory of the view's states (each under ``view/<name>/``)
STATE_DIR = "view"
#: the state holding the view's whole result
RESULT = "result"
#: the state holding the epoch's change of the view (never carried to the next epoch)
CHANGE = "change"
#: how many differing rows a failed verification names
SHOWN = 3
#: a file input's rows are the state ``view/in_<input>/``, each with this column naming the
#: file it came from (its key under the data root)
FILE_ROWS = "in_"
FILE_COLUMN = "_ckpt_file"
#: where a file input's index of the files it consumed lives in the task's state
FILE_SEEN = "view_files/"
#: an unkeyed view's output ``output_mode`` when its table grew by the epoch's added rows,
#: the files it had kept (an ``overwrite`` output listing them, PROTOCOL 1.26)
GROWN = "overwrite (grown)"


class ViewJobError(JobResultError):
    """The view cannot run as declared (a query that does not fit its inputs, a key that
    is not one): the job's own mistake, the same on every retry."""


class TaskStates:
    """:class:`~spark_jobs.runtime.views.StateStore` over a job run's checkpointed state:
    a state is read from the previous epoch's handle and written as this epoch's state
    files (``view/<name>/``). ``fresh`` reads no previous state (a full refresh)."""

    def __init__(self, run: JobRun, namespace: str, fresh: bool = False):
        self.run, self.ns, self.fresh = run, namespace, fresh
        #: the files :meth:`save` wrote this epoch, by state
        self.saved: dict[str, list[Any]] = {}

    def _name(self, relation: str) -> str:
        return relation[len(self.ns):] if relation.startswith(self.ns) else relation

    def load(self, name: str) -> Any | None:
        if self.fresh:
            return None
        return _read(self.run, self.run.files(self.run.previous,
                                              f"{STATE_DIR}/{self._name(name)}/"))

    def save(self, name: str, df: Any) -> Any:
        refs = self.run.write_state(df, f"{STATE_DIR}/{self._name(name)}")
        self.saved[self._name(name)] = refs
        # nothing written for no rows: the state is its empty shape
        return _read(self.run, refs) if refs else df.limit(0)

    def append(self, name: str, adds: Any, whole: Any) -> Any:
        """A growing state's batches (:mod:`.views`): ``view/<name>/b<epoch>/`` each, the
        previous epoch's referenced, this epoch's written."""
        return self._append(name, whole, lambda batch: self.run.write_state(adds, batch))

    def append_saved(self, name: str, saved: str, whole: Any) -> Any:
        """As :meth:`append`, the new batch being the files state ``saved`` was written
        as this epoch (:meth:`save`), referenced under this state's name: the view's result
        grows by its change, which is not written twice."""
        from dataclasses import replace

        written = f"{STATE_DIR}/{saved}/"

        def same(batch: str) -> list[Any]:
            return [self.run.writer.reference(
                replace(r, name=f"{batch}/{r.name[len(written):]}"))
                for r in self.saved[saved]]

        return self._append(name, whole, same)

    def _append(self, name: str, whole: Any, batch_of: Callable[[str], list[Any]]) -> Any:
        prefix = f"{STATE_DIR}/{self._name(name)}/"
        before = [] if self.fresh else self.run.files(self.run.previous, prefix)
        batches: dict[str, int] = {}
        for ref in before:
            parts = ref.name[len(prefix):].split("/", 1)
            key = parts[0] if len(parts) > 1 and parts[0].startswith("b") else ""
            batches[key] = batches.get(key, 0) + ref.size
        batch = f"{prefix}b{self.run.epoch_id}"
        if not batches or due(list(batches.values())):
            refs = self.run.write_state(whole, batch)
            return _read(self.run, refs) if refs else whole.limit(0)
        refs = [self.run.writer.reference(ref) for ref in before]
        refs += batch_of(batch)
        return _read(self.run, refs)


def _read(run: JobRun, refs: list[Any]) -> Any | None:
    """The Parquet state files ``refs`` as one DataFrame (their own schema); None for none."""
    if not refs:
        return None
    return run.spark.read.parquet(*[spark_uri(r.uri) for r in refs])


def _expanded(spark: Any, relation: str, columns: Sequence[str]) -> Any:
    """The rows of Z-set ``relation``, each repeated as its weight says (a batch query's,
    or an overwritten table's, rows); a row in several batches once, its weights summed."""
    cols = ", ".join(q(c) for c in columns)
    summed = consolidated(tuple(columns), f"SELECT * FROM {relation}")
    return spark.sql(f"SELECT {cols} FROM ({summed}) "
                     f"LATERAL VIEW explode(sequence(1, CAST({WEIGHT} AS INT))) `_copies` "
                     "AS `_copy`")


def view_task(run: JobRun) -> ViewTask:
    plan = run.barrier.plan.get(run.task_id)
    if plan is None or plan.view is None:
        raise ViewJobError(f"task {run.task_id} is not a view task (its plan holds no view)")
    return plan.view


@dataclass
class ViewInput:
    """One input of a view this epoch: a table input, or the view of an upstream task of
    the same DAG (its change and its whole result, from its handle of this epoch)."""

    name: str
    #: read whole: no version (or upstream view) consumed before
    whole: bool
    changed: bool
    changed_bytes: int
    #: bytes added minus bytes removed (the input's size as the planner tracks it)
    moved_bytes: int
    schema: Any  # pyspark StructType of its rows
    #: its change as a Z-set (its columns and the weight); its whole content when ``whole``
    changes: Callable[[], Any]
    #: its whole content, a row per row (a batch query's input)
    content: Callable[[], Any]


def _table_input(run: JobRun, name: str) -> ViewInput:
    from pyspark.sql import functions as F

    ch = run.table_changes(name)
    cs = ch.change_set
    # A file whose deletion vector changed is named with the rows it changes (only_rows)
    # and stays live: it moves no bytes in or out of the input.
    moved = sum(f.size for f in cs.added if f.only_rows is None) - \
        sum(f.size for f in cs.removed if f.only_rows is None)
    changed = sum(f.changed_bytes for f in (*cs.added, *cs.removed))
    return ViewInput(
        name, ch.full, not ch.empty, changed, moved,
        ch.added.schema,
        lambda: ch.added.withColumn(WEIGHT, F.lit(1).cast("bigint")) if ch.full
        else ch.signed(WEIGHT),
        lambda: ch.added if ch.full else run.table_snapshot(name))


def _view_input(run: JobRun, name: str, task: str, kept: ViewRecord | None) -> ViewInput:
    import json

    from pyspark.sql.types import LongType, StructField, StructType

    handle = run.upstream.get(task)
    record = ViewRecord.from_json((handle.offsets or {}).get("view")
                                  if handle is not None and isinstance(handle.offsets, dict)
                                  else None)
    if handle is None or record is None:
        raise ViewJobError(f"view input {name!r}: task {task!r} is not a view upstream of "
                           f"{run.task_id!r} (wire it with >>)")
    schema = StructType.fromJson(json.loads(record.schema))
    weighted = StructType([*schema.fields, StructField(WEIGHT, LongType())])
    result = run.files(handle, f"{STATE_DIR}/{RESULT}/")
    change = run.files(handle, f"{STATE_DIR}/{CHANGE}/")
    whole = kept is None or name not in kept.input_bytes

    def read(refs: list[Any]) -> Any:
        return run.read_parquet(refs, weighted) if refs else \
            run.spark.createDataFrame([], weighted)

    def content() -> Any:
        read(result).createOrReplaceTempView(f"v_{run.task_id}__up_{name}")
        return _expanded(run.spark, f"v_{run.task_id}__up_{name}", schema.names)

    size = sum(f.size for f in result)
    moved = size - (kept.input_bytes.get(name, 0) if kept else 0)
    return ViewInput(name, whole, whole or any(f.size for f in change),
                     size if whole else sum(f.size for f in change), moved, schema,
                     lambda: read(result if whole else change), content)


def _file_input(run: JobRun, name: str, src: FileInput, kept: ViewRecord | None, ns: str,
                offsets: dict[str, Any]) -> ViewInput:
    """File input ``name`` this epoch (PROTOCOL 6.15, 1.27): the files landed under its
    prefix since the offsets the restored epoch recorded (``offsets[name]`` gets this
    epoch's). Its rows are kept as the task's state (``view/in_<name>/``), each with the
    file it came from: a new file adds its rows, a file rewritten since it was read
    retracts the rows its earlier content added and adds its new ones. The epoch's change
    is kept as a new batch of that state before anything reads it, so that the refresh
    and every later epoch see the same rows whatever lands meanwhile."""
    from pyspark.sql import functions as F

    spark = run.spark
    previous = run.previous.offsets if run.previous is not None else None
    was = (previous.get("files") or {}).get(name) if isinstance(previous, dict) else None
    found = run.new_input(src.prefix, suffix=src.suffix, offsets=was,
                          seen=f"{FILE_SEEN}{name}/")
    offsets[name] = found.offsets
    schema = spark.createDataFrame([], src.schema).schema
    states = TaskStates(run, ns)
    state = f"{FILE_ROWS}{name}"
    before = states.load(state)
    whole = kept is None or name not in kept.input_bytes
    rows = before
    changed_bytes = moved = 0
    if found.new:
        sizes = found.sizes
        replaced = set(found.replaced)
        changed_bytes = sum(sizes.get(k, 0) * (2 if k in replaced else 1) for k in found.new)
        moved = sum(sizes.get(k, 0) for k in found.new if k not in replaced)
        change = _read_files(run, src, schema, found.new)
        if before is not None and replaced:
            change = change.unionByName(before.where(F.col(FILE_COLUMN).isin(sorted(replaced)))
                                        .withColumn(WEIGHT, -F.col(WEIGHT)))
        change.createOrReplaceTempView(f"{ns}files_{name}")
        columns = (*schema.names, FILE_COLUMN)
        # the change kept first and read back: the refresh and the kept rows read the
        # same rows, whatever lands under the prefix meanwhile
        change = states.save(f"{CHANGE}_{state}", spark.sql(consolidated(
            columns, f"SELECT * FROM {ns}files_{name}")))
        change.createOrReplaceTempView(f"{ns}files_change_{name}")
        union = f"SELECT * FROM {ns}files_change_{name}"
        if before is not None:
            before.createOrReplaceTempView(f"{ns}files_before_{name}")
            union = f"SELECT * FROM {ns}files_before_{name} UNION ALL {union}"
        # the change is the rows' new batch (its files referenced, not written again)
        rows = states.append_saved(state, f"{CHANGE}_{state}",
                                   spark.sql(consolidated(columns, union)))
    size = (kept.input_bytes.get(name, 0) if kept and not whole else 0) + moved

    def content() -> Any:
        if rows is None:
            return spark.createDataFrame([], schema)
        rows.createOrReplaceTempView(f"{ns}files_all_{name}")
        return _expanded(spark, f"{ns}files_all_{name}", schema.names)

    def changes() -> Any:
        if whole:
            return content().withColumn(WEIGHT, F.lit(1).cast("bigint"))
        if not found.new:
            return spark.createDataFrame([], schema).withColumn(WEIGHT,
                                                                F.lit(1).cast("bigint"))
        return change.drop(FILE_COLUMN)

    return ViewInput(name, whole, whole or bool(found.new), changed_bytes if not whole
                     else size, moved if not whole else size, schema, changes, content)


#: a file path Spark's ``_metadata.file_path`` spells as it is (it percent-encodes others)
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._\-=/:]+")


def _read_files(run: JobRun, src: FileInput, schema: Any, keys: Sequence[str]) -> Any:
    """The rows of files ``keys`` (of the data root), each with the key it came from
    (:data:`FILE_COLUMN`: what a rewrite of that file retracts) and weight 1. Files whose
    path Spark spells as it is are read at once, the key taken from each row's file path;
    any other (a space, a ``%`` in its path: Spark percent-encodes those) on its own."""
    from functools import reduce

    from pyspark.sql import functions as F

    spark = run.spark
    cols = [F.col(q(c)) for c in schema.names]
    one = F.lit(1).cast("bigint").alias(WEIGHT)

    def reader() -> Any:
        return spark.read.format(src.format).schema(schema).options(**src.reader_options)

    uri = {k: spark_uri(run.data_root.uri(k)) for k in keys}
    # the data root as a file's path starts with it (a key "x"'s path less the "x")
    root = _path_of(spark_uri(run.data_root.uri("x")))[:-1]
    plain = [k for k in keys if _PLAIN_PATH.fullmatch(_path_of(uri[k]))
             and _path_of(uri[k]) == root + k]
    frames = []
    if plain:
        frames.append(reader().load([uri[k] for k in plain]).select(
            *cols, F.expr(f"substr(_metadata.file_path, {len(root) + 1})").alias(FILE_COLUMN),
            one))
    frames += [reader().load(uri[k]).select(*cols, F.lit(k).alias(FILE_COLUMN), one)
               for k in keys if k not in set(plain)]
    return reduce(lambda a, b: a.unionByName(b), frames)


def _path_of(uri: str) -> str:
    """The path of a URI as Spark's ``_metadata.file_path`` spells it (``file:/x/y`` for
    ``file:///x/y``: Hadoop's Path drops an empty authority)."""
    return uri.replace("file:///", "file:/", 1) if uri.startswith("file:///") else uri


def maintain_view(run: JobRun) -> JobResult:
    """The job of every view task (module docstring)."""
    from .job_run import JobResult

    t0 = time.monotonic()
    view = view_task(run)
    spark = run.spark
    ns = f"v_{run.task_id}__"
    _drop(spark, ns)
    try:
        offsets = run.previous.offsets if run.previous is not None else None
        kept = ViewRecord.from_json(offsets.get("view") if isinstance(offsets, dict)
                                    else None)
        found = {n: _table_input(run, n)
                 for n in sorted(run.barrier.plan[run.task_id].table_inputs)}
        found.update({n: _view_input(run, n, t, kept) for n, t in sorted(view.views.items())})
        files_offsets: dict[str, Any] = {}
        found.update({n: _file_input(run, n, f, kept, ns, files_offsets)
                      for n, f in sorted(view.files.items())})
        schemas = {n: {f.name: f.dataType.simpleString() for f in i.schema.fields}
                   for n, i in found.items()}
        try:
            plan = plan_view(view.sql, schemas)
        except ViewQueryError as exc:
            raise ViewJobError(f"view {view.output}: {exc}") from None
        sizes = {n: max(0, (0 if i.whole or kept is None else kept.input_bytes.get(n, 0))
                        + i.moved_bytes) for n, i in found.items()}
        changes = [InputChange(n, i.whole, i.changed, i.changed_bytes, sizes[n])
                   for n, i in found.items()]
        costs = kept.costs if kept else RefreshCosts()
        qid = query_id(view.sql)
        refresh = choose(fallback=plan.fallback, kept=kept, query=qid, inputs=changes,
                         costs=costs, full_above=view.full_refresh_above)
        key = tuple(view.keys) or plan.key
        columns = tuple(plan.columns)
        _check_columns(view, columns, key)
        spec = TableSpec.from_json({**view.table, "mode": "merge" if key else "overwrite",
                                    "keys": list(key)})
        if refresh.mode == "incremental" and not any(c.changed for c in changes):
            assert kept is not None  # choose() said incremental: there is a kept record
            schema, carried = kept.schema, _carry(run)
            rows, mode = _write_unchanged(run, view, spec, key, schema, ns)
        else:
            carried = 0
            types = _batch_types(spark, view, found, columns)
            change, result = _refresh(run, view, plan, found, refresh, ns, columns, types)
            schema = result.drop(WEIGHT).schema.json()
            for n in view.files:
                if not found[n].changed:  # its rows' state as the restored epoch kept it
                    for ref in run.files(run.previous, f"{STATE_DIR}/{FILE_ROWS}{n}/"):
                        run.writer.reference(ref)
            # the table holds the kept result: the previous completed epoch committed it
            holds_kept = kept is not None and kept.schema == schema
            rows, mode = _write_output(run, view, spec, key, columns, change, result, ns,
                                       holds_kept)
        verified = None
        if view.verify_every and run.epoch_id % view.verify_every == 0:
            verified = _verify(run, view, found, columns, ns)
        ms = (time.monotonic() - t0) * 1000
        if carried == 0:
            size = refresh.changed_bytes if refresh.mode == "incremental" else \
                refresh.input_bytes
            costs = costs.observed(refresh.mode, ms, size)
        record = ViewRecord(qid, sizes, costs, schema)
        metrics: dict[str, Any] = {**refresh.to_json(), "output": view.output,
                                   "output_mode": mode, "keys": list(key),
                                   "incremental_plan": plan.incremental,
                                   "refresh_ms": round(ms, 1)}
        if carried:
            metrics["state_bytes_carried"] = carried
        if verified is not None:
            metrics["verified_ms"] = round(verified, 1)
        offsets_out: dict[str, Any] = {"view": record.to_json()}
        if files_offsets:
            offsets_out["files"] = files_offsets
        return JobResult(offsets=offsets_out,
                         row_counts={view.output: rows}, metrics={"view": metrics})
    finally:
        # and the views named after its inputs (a full recompute's query and the
        # verification read the inputs by their names)
        _drop(spark, ns, {*run.barrier.plan[run.task_id].table_inputs, *view.views,
                          *view.files})


def _check_columns(view: ViewTask, columns: tuple[str, ...], key: tuple[str, ...]) -> None:
    if len(set(columns)) != len(columns):
        raise ViewJobError(f"view {view.output}: two output columns share a name "
                           f"({', '.join(columns)}): give each its own alias")
    missing = [k for k in key if k not in columns]
    if missing:
        raise ViewJobError(f"view {view.output}: key column(s) {', '.join(missing)} are "
                           "not columns of the view")


def _drop(spark: Any, ns: str, names: Collection[str] = ()) -> None:
    """Drop the task's temporary views (its namespace ``ns``, and ``names``): a session an
    embedded run shares between epochs and tasks must not show one epoch's relations to
    the next. The inputs' changes are held by the engine, never named in the session."""
    for t in spark.catalog.listTables():
        if t.isTemporary and (t.name.startswith(ns) or t.name in names):
            spark.catalog.dropTempView(t.name)


def _carry(run: JobRun) -> int:
    """An epoch with no change: every state file of the previous epoch, by reference, but
    its change (this epoch's is none)."""
    carried = 0
    for ref in run.files(run.previous, f"{STATE_DIR}/"):
        if ref.name.startswith(f"{STATE_DIR}/{CHANGE}"):  # the view's, a file input's
            continue
        run.writer.reference(ref)
        carried += ref.size
    return carried


def _batch_types(spark: Any, view: ViewTask, found: dict[str, ViewInput],
                 columns: tuple[str, ...]) -> dict[str, str]:
    """Each output column's SQL type as the view's query run as a batch gives it: the
    rules compute an AVG of decimals as a sum over a count, whose decimal scale is not
    AVG's, so the maintained rows are cast to these. Spark analyses the query over empty
    inputs of the same schemas; nothing is read."""
    for n, i in found.items():
        spark.createDataFrame([], i.schema).createOrReplaceTempView(n)
    try:
        fields = spark.sql(view.sql).schema.fields
    finally:
        for n in found:
            spark.catalog.dropTempView(n)
    return {c: f.dataType.simpleString() for c, f in zip(columns, fields, strict=True)}


def _typed(columns: tuple[str, ...], types: dict[str, str], rel: str) -> str:
    """The Z-set ``rel`` with each column cast to its type in ``types``."""
    picked = ", ".join(f"CAST({q(c)} AS {types[c]}) AS {q(c)}" for c in columns)
    return f"SELECT {picked}, {WEIGHT} FROM {rel}"


def _refresh(run: JobRun, view: ViewTask, plan: Any, found: dict[str, ViewInput],
             refresh: Refresh, ns: str, columns: tuple[str, ...], types: dict[str, str]
             ) -> tuple[Any, Any]:
    """Run the refresh; returns (the view's change, its whole result), both kept as this
    epoch's states and read back, Z-sets over ``columns`` (of the batch query's
    ``types``) and the weight."""
    # the engine's relations stay defined (and its session settings set) until the change
    # and the result are kept
    with SparkEngine(run.spark, TaskStates(run, ns, fresh=refresh.mode == "full"),
                     run.concurrently) as engine:
        return _refreshed(run, view, plan, found, refresh, ns, columns, types, engine)


def _refreshed(run: JobRun, view: ViewTask, plan: Any, found: dict[str, ViewInput],
               refresh: Refresh, ns: str, columns: tuple[str, ...], types: dict[str, str],
               engine: SparkEngine) -> tuple[Any, Any]:
    from pyspark.sql import functions as F

    spark = run.spark
    kept = TaskStates(run, ns)
    before = kept.load(RESULT)
    if before is not None:
        engine.hold(f"{ns}before", before)
    cols = ", ".join(q(c) for c in columns)
    one = F.lit(1).cast("bigint")
    if refresh.mode == "incremental":
        for n, i in found.items():
            engine.hold(input_relation(n), i.changes())
        out = run_epoch(program(plan.root, ns), engine)
    else:
        for n, i in found.items():
            whole = i.content()
            engine.hold(input_relation(n), whole.withColumn(WEIGHT, one))
            if not plan.incremental:  # the query itself reads the inputs by name
                whole.createOrReplaceTempView(n)
        if plan.incremental:
            out = run_epoch(program(plan.root, ns), engine)
        else:
            out = f"{ns}now"
            engine.hold(out, spark.sql(view.sql).toDF(*columns).withColumn(WEIGHT, one))
        if before is not None:
            engine.define(f"{ns}raw", f"SELECT * FROM {out} UNION ALL "
                                      f"SELECT {cols}, -{WEIGHT} AS {WEIGHT} FROM {ns}before")
            out = f"{ns}raw"
    change = kept.save(CHANGE, engine.sql(consolidated(columns, _typed(columns, types, out))))
    engine.hold(f"{ns}change", change)
    union = f"SELECT * FROM {ns}change"
    if before is not None:  # a result kept before its types were the batch's: cast too
        union = f"{_typed(columns, types, f'{ns}before')} UNION ALL {union}"
    whole = engine.sql(consolidated(columns, union))
    if refresh.mode == "incremental" and before is not None and \
            _types(before) == _types(change):
        # the result grows by the change: its files are the new batch, the earlier
        # batches referenced
        return change, kept.append_saved(RESULT, CHANGE, whole)
    return change, kept.save(RESULT, whole)


def _types(df: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


#: separate writes an unkeyed view's table may grow by before the view is written whole
#: again (:func:`~spark_jobs.runtime.views.due`): a bound on its small files, which a
#: table's readers pay for, while the rewrites stay a small share of the epochs
OUTPUT_BATCHES = 32
#: a staged directory in a file's URI (checkpointing.tables.spec.staged_dir)
_STAGED = re.compile(r"/(ckpt-[^/]*-e\d{10}-[^/]*)/")


def _growable(run: JobRun, output: str, spec: TableSpec) -> bool:
    """Whether the unkeyed view's table can grow by the epoch's added rows, its files
    kept by reference: the restored epoch staged its whole content (PROTOCOL 1.8), in
    writes (batches) not yet :func:`due` to be merged into one."""
    files = run.can_grow(output, spec)
    if files is None:
        return False
    batches: dict[str, int] = {}
    for f in files:
        # the staged directory each write made (PROTOCOL 6.12): one batch per write
        staged = _STAGED.search(f.uri)
        d = staged.group(1) if staged else f.uri
        batches[d] = batches.get(d, 0) + f.size
    return not due(list(batches.values()), OUTPUT_BATCHES)


def _write_output(run: JobRun, view: ViewTask, spec: TableSpec, key: tuple[str, ...],
                  columns: tuple[str, ...], change: Any, result: Any, ns: str,
                  holds_kept: bool) -> tuple[int, str]:
    """Stage the output; returns (rows staged, how: the mode, ``grown`` for an unkeyed
    table that grew). Rows with a key: a keyed merge of the changed rows. Without one:
    when the table holds the kept result (``holds_kept``) and the change only adds rows
    (a filter, a projection, a join over inputs that only grew), the rows added, the
    table's files kept (the epoch writes what changed, not the view); else the whole
    result, overwritten (a row without a key cannot be deleted alone: two equal rows are
    one to a table's delete)."""
    spark = run.spark
    cols = ", ".join(q(c) for c in columns)
    if spec.mode == "merge":
        change.createOrReplaceTempView(f"{ns}out")
        keys = ", ".join(q(k) for k in key)
        # Only a declared key is checked (a Spark job): the plan's own key (the GROUP BY
        # columns, a DISTINCT's row) holds one row per value by construction.
        dup = view.keys and spark.sql(
            f"SELECT {keys}, COUNT(*) AS n FROM {ns}out WHERE {WEIGHT} > 0 GROUP BY {keys} "
            f"HAVING COUNT(*) > 1 OR MAX({WEIGHT}) > 1 LIMIT 1").collect()
        if dup:
            raise ViewJobError(f"view {view.output}: the key ({', '.join(key)}) is not "
                               f"unique: {_row(dup[0], list(key))} has several rows; "
                               "declare keys= that identify a row of the view")
        upserts = spark.sql(f"SELECT {cols} FROM {ns}out WHERE {WEIGHT} > 0")
        deleted = spark.sql(f"SELECT DISTINCT {keys} FROM {ns}out WHERE {WEIGHT} < 0 "
                            f"EXCEPT SELECT {keys} FROM {ns}out WHERE {WEIGHT} > 0")
        return run.write_table(upserts, view.output, spec, deleted=deleted), spec.mode
    if holds_kept and _growable(run, view.output, spec):
        change.createOrReplaceTempView(f"{ns}grown")
        # the change is consolidated (a row per value, its weights summed) and kept as
        # state files: this reads those, not the inputs
        if not spark.sql(f"SELECT 1 FROM {ns}grown WHERE {WEIGHT} < 0 LIMIT 1").collect():
            return run.write_table(_expanded(spark, f"{ns}grown", columns), view.output,
                                   spec, grows=True), GROWN
    result.createOrReplaceTempView(f"{ns}all")
    return run.write_table(_expanded(spark, f"{ns}all", columns), view.output,
                           spec), spec.mode


def _write_unchanged(run: JobRun, view: ViewTask, spec: TableSpec, key: tuple[str, ...],
                     schema: str, ns: str) -> tuple[int, str]:
    """Stage the output of an epoch with no change: a merge of no row; an unkeyed table's
    files kept as they are, without a Spark job; or, when the restored epoch staged no
    such table, the kept result written again."""
    import json

    from pyspark.sql.types import StructType

    spark = run.spark
    struct = StructType.fromJson(json.loads(schema))
    if spec.mode == "merge":
        empty = spark.createDataFrame([], struct)
        run.write_table(empty, view.output, spec, rows=0, deleted=empty.select(*key))
        return 0, spec.mode
    if run.can_grow(view.output, spec) is not None:
        run.keep_table(view.output, spec, rows=0)
        return 0, GROWN
    result = TaskStates(run, ns).load(RESULT)
    if result is None:
        return run.write_table(spark.createDataFrame([], struct), view.output, spec,
                               rows=0), spec.mode
    return _write_output(run, view, spec, key, tuple(struct.names), None, result, ns, False)


def _row(row: Any, names: Sequence[str]) -> str:
    return "(" + ", ".join(f"{n}={row[n]!r}" for n in names) + ")"


def _verify(run: JobRun, view: ViewTask, found: dict[str, ViewInput],
            columns: tuple[str, ...], ns: str) -> float:
    """Recompute the view at the pinned versions and compare it with the kept result;
    a difference declines the epoch naming the first differing rows. Returns the ms."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    spark = run.spark
    for n, i in found.items():
        i.content().createOrReplaceTempView(n)
    spark.sql(view.sql).toDF(*columns).withColumn(WEIGHT, F.lit(1).cast("bigint")) \
        .createOrReplaceTempView(f"{ns}batch")
    kept = _written_result(run)
    cols = ", ".join(q(c) for c in columns)
    if kept is None:
        union = f"SELECT * FROM {ns}batch"
    else:
        kept.createOrReplaceTempView(f"{ns}kept")
        union = (f"SELECT * FROM {ns}batch UNION ALL "
                 f"SELECT {cols}, -{WEIGHT} AS {WEIGHT} FROM {ns}kept")
    diff = spark.sql(consolidated(columns, union))
    first = diff.limit(SHOWN).collect()
    if first:
        n = diff.count()
        shown = "; ".join(f"{'missing' if r[WEIGHT] > 0 else 'extra'} {_row(r, columns)}"
                          for r in first)
        raise DeclineEpoch(f"view {view.output}: verification failed: the maintained "
                           f"result differs from the query run in full at the pinned "
                           f"versions in {n} row(s): {shown}")
    return (time.monotonic() - t0) * 1000


def _written_result(run: JobRun) -> Any | None:
    """The view's whole result as this epoch keeps it (written, or carried)."""
    return _read(run, [r for r in run.writer.files(f"{STATE_DIR}/{RESULT}/")
                       if r.name.endswith(".parquet")])
