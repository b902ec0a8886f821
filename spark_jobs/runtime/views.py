"""Incremental views on Spark: the statements of a view's plan
(:mod:`checkpointing.ivm`) run as Spark SQL, each relation a temporary view of the
session, each operator's state materialized once per epoch by a :class:`StateStore`
(the task's checkpointed state in a job; a directory of Parquet files here).

A defined relation is a temporary view of its query's analyzed plan: redefining a relation
it reads (a state replaced at the end of the epoch) does not change it.

A state that grows by a relation (a join side, :class:`~checkpointing.ivm.rules.State`) is
kept as batches: the earlier epochs' files by reference and this epoch's added rows as one
new batch, so that an epoch writes what changed, not the whole state. The batches are
merged into one (:func:`due`) when they are :data:`MAX_BATCHES`, or when the batches
beside the largest outweigh it: before a batch is added, a state's batches hold at most
twice the largest one's bytes."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from checkpointing.ivm.operators import WEIGHT
from checkpointing.ivm.rules import State, consolidated

#: batches of a growing state before they are merged into one
MAX_BATCHES = 8


def due(batches: Sequence[int], max_batches: int | None = None) -> bool:
    """Whether a state kept as batches of these sizes (bytes) is merged into one before
    the next batch is added: there are ``max_batches`` (:data:`MAX_BATCHES`) already, or
    the batches beside the largest hold more bytes than it."""
    if len(batches) >= (MAX_BATCHES if max_batches is None else max_batches):
        return True
    return len(batches) > 1 and sum(batches) - max(batches) > max(batches)


class StateStore(Protocol):
    """Where an engine keeps the operators' states between epochs."""

    def load(self, name: str) -> Any | None:
        """The state ``name`` the previous epoch kept (a DataFrame), or None."""

    def save(self, name: str, df: Any) -> Any:
        """Keep ``df`` as state ``name`` for the next epoch; returns it as kept (read
        back, so that later statements read the kept files, not the query again)."""

    def append(self, name: str, adds: Any, whole: Any) -> Any:
        """Keep state ``name`` for the next epoch as its previous batches plus ``adds`` (a
        new batch), or as ``whole`` alone when the batches are :func:`due` to be merged
        (or there are none); returns it as kept, read back."""


class SparkEngine:
    """:class:`checkpointing.ivm.maintain.Engine` on a SparkSession (local, submit or
    Connect). Used as a context manager for one epoch: it sets :data:`SESSION_CONF` on the
    session meanwhile (restored on exit) and holds the relations it computed once until
    then."""

    #: Spark infers filters from the constraints of a plan's operators: on the rules' unions
    #: over relations computed once, that inference failed inside Spark (``key not found``
    #: in ``Union.rewriteConstraints``, TPC-H Q21), and the rules' filters are already
    #: where they belong.
    SESSION_CONF = {"spark.sql.constraintPropagation.enabled": "false"}

    def __init__(self, spark: Any, states: StateStore):
        self.spark, self.states = spark, states
        #: the relations computed once (local checkpoints): held for as long as the engine,
        #: since a Spark Connect server releases one when its client object is collected,
        #: and the temporary views over it would then fail
        self.computed: list[Any] = []
        self._before: dict[str, str | None] = {}
        self._active: _Active | None = None

    def __enter__(self) -> SparkEngine:
        for k, v in self.SESSION_CONF.items():
            self._before[k] = self.spark.conf.get(k, None)
            self.spark.conf.set(k, v)
        self._active = _Active.of(self.spark)
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self._before.items():
            if v is None:
                self.spark.conf.unset(k)
            else:
                self.spark.conf.set(k, v)
        self.computed.clear()
        if self._active is not None:
            self._active.restore()
            self._active = None

    def exists(self, name: str) -> bool:
        if self.spark.catalog.tableExists(name):
            return True
        kept = self.states.load(name)
        if kept is None:
            return False
        kept.createOrReplaceTempView(name)
        return True

    def define(self, name: str, sql: str, once: bool = False) -> None:
        df = self.spark.sql(sql)
        if once:
            # computed now, its lineage cut: the statements that read it do not inline
            # (and run again) its query
            df = df.localCheckpoint(eager=True)
            self.computed.append(df)
        df.createOrReplaceTempView(name)

    def keep(self, states: tuple[State, ...]) -> None:
        for s in states:
            if s.grows is None:
                kept = self.states.save(s.name, self.spark.table(s.next))
            else:
                names = self.spark.table(s.grows).columns
                adds = self.spark.sql(consolidated(tuple(n for n in names if n != WEIGHT),
                                                   f"SELECT * FROM {s.grows}"))  # noqa: S608
                kept = self.states.append(s.name, adds, self.spark.table(s.next))
            kept.createOrReplaceTempView(s.name)


class _Active:
    """The engine's session made the thread's active one while the engine is in use, the
    previous one restored after.

    Spark Connect's Python client (4.1) hands back a local checkpoint bound to the
    thread's *active* session, not to the session that ran it. With two sessions open in
    one process (an earlier one still open, as in a notebook or a test process), a view
    over the checkpoint is then sent to the other session and fails (``No DataFrame with
    id ... is found in the session``). A classic session binds it to its own session, so
    there is nothing to do there."""

    def __init__(self, holder: Any, before: Any):
        self.holder, self.before = holder, before

    @classmethod
    def of(cls, spark: Any) -> _Active | None:
        holder = getattr(type(spark), "_active_session", None)
        if not isinstance(holder, threading.local):
            return None  # a classic session
        active = cls(holder, getattr(holder, "session", None))
        holder.session = spark
        return active

    def restore(self) -> None:
        self.holder.session = self.before


class ParquetStates:
    """States as Parquet directories ``<root>/<epoch>/<name>``: epoch ``n`` reads what the
    newest earlier epoch kept. A growing state's batches are subdirectories ``b<epoch>``,
    the earlier ones hard links to the files an earlier epoch wrote."""

    def __init__(self, spark: Any, root: str | Path, epoch: int,
                 max_batches: int | None = None):
        self.spark, self.root, self.epoch = spark, Path(root), epoch
        self.max_batches = max_batches

    def _previous(self, name: str) -> Path | None:
        earlier = sorted((int(p.name) for p in self.root.glob("*") if p.name.isdigit()
                          and int(p.name) < self.epoch and (p / name).exists()), reverse=True)
        return self.root / str(earlier[0]) / name if earlier else None

    def load(self, name: str) -> Any | None:
        found = self._previous(name)
        if found is None:
            return None
        return self.spark.read.parquet(*map(str, _parquet_dirs(found)))

    def save(self, name: str, df: Any) -> Any:
        path = self.root / str(self.epoch) / name
        df.write.mode("overwrite").parquet(str(path))
        return self.spark.read.parquet(str(path))

    def append(self, name: str, adds: Any, whole: Any) -> Any:
        import os
        import shutil

        found = self._previous(name)
        path = self.root / str(self.epoch) / name
        batches = [] if found is None else [
            sum(f.stat().st_size for f in d.rglob("*.parquet")) for d in _parquet_dirs(found)]
        if not batches or due(batches, self.max_batches):
            whole.write.mode("overwrite").parquet(str(path / f"b{self.epoch}"))
        else:
            assert found is not None
            for d in _parquet_dirs(found):
                shutil.copytree(d, path / d.name, copy_function=os.link)
            adds.write.mode("overwrite").parquet(str(path / f"b{self.epoch}"))
        return self.spark.read.parquet(*map(str, _parquet_dirs(path)))


def _parquet_dirs(path: Path) -> list[Path]:
    """A state's directory, or its batches' (``b<epoch>`` subdirectories)."""
    subs = sorted(p for p in path.iterdir() if p.is_dir() and p.name.startswith("b"))
    return subs or [path]
