"""Incremental views on Spark: the statements of a view's plan
(:mod:`checkpointing.ivm`) run as Spark SQL, each operator's state materialized once per
epoch by a :class:`StateStore` (the task's checkpointed state in a job; a directory of
Parquet files here).

A statement is not sent to Spark when it is defined: it is kept as its SQL, and what runs
(a relation computed once, a state kept, the view's change read by the caller) is one
query holding every deferred statement it reads as a common table expression. Through
Spark Connect each statement sent costs a round trip or two (its analysis, a temporary
view, the view dropped at the end), about as much as a small Spark job; a CTE costs
nothing until the query that holds it runs. What Spark names is fixed for the epoch: the
inputs' changes, the relations computed once, the states as the previous epoch kept them
(a state kept is read by the next epoch, from its store).

A state that grows by a relation (a join side, :class:`~checkpointing.ivm.rules.State`) is
kept as batches: the earlier epochs' files by reference and this epoch's added rows as one
new batch, so that an epoch writes what changed, not the whole state. The batches are
merged into one (:func:`due`) when they are :data:`MAX_BATCHES`, or when the batches
beside the largest outweigh it: before a batch is added, a state's batches hold at most
twice the largest one's bytes."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from checkpointing.ivm.deferred import Deferred
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

    def __init__(self, spark: Any, states: StateStore,
                 concurrently: Callable[..., list[Any]] | None = None):
        self.spark, self.states = spark, states
        #: runs independent actions, at once where it can (a job run's
        #: :meth:`~spark_jobs.runtime.run_state.RunState.concurrently`); one by one if None
        self.concurrently = concurrently or (lambda *actions: [a() for a in actions])
        #: the relations it holds as DataFrames, by name (an input's change, a state as the
        #: previous epoch kept it, a relation computed once): the statements that read one
        #: are sent with its plan (:meth:`sql`), not over a temporary view. Held for as
        #: long as the engine: a Spark Connect server releases a local checkpoint when its
        #: client object is collected.
        self.held: dict[str, Any] = {}
        #: the statements defined and not sent
        self.deferred = Deferred()
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
        self.held.clear()
        self.deferred.clear()
        if self._active is not None:
            self._active.restore()
            self._active = None

    def exists(self, name: str) -> bool:
        # the store, not the session: a session shared between epochs may still name
        # the state an earlier epoch read
        kept = self.states.load(name)
        if kept is None:
            return False
        self.hold(name, kept)
        return True

    def define(self, name: str, sql: str, once: bool = False) -> None:
        if not once:
            self.deferred.add(name, sql)
            return
        # computed now, its lineage cut: the statements that read it do not inline (and
        # run again) its query
        self.hold(name, self.sql(sql).localCheckpoint(eager=True))

    def hold(self, name: str, df: Any) -> None:
        """Make DataFrame ``df`` relation ``name`` of this epoch's statements."""
        self.held[name] = df

    def sql(self, sql: str) -> Any:
        """Statement ``sql`` as a DataFrame: the deferred statements it reads folded in,
        the relations held sent with it (Spark's SQL with DataFrame arguments); any other
        name it reads is the session's."""
        fused = self.deferred.fused(sql)
        frames: dict[str, Any] = {}
        text = bind(fused, self.held, frames)
        return self.spark.sql(text, **frames) if frames else self.spark.sql(fused)

    def table(self, name: str) -> Any:
        """Relation ``name`` as a DataFrame."""
        if name in self.held:
            return self.held[name]
        if name in self.deferred:
            return self.sql(f"SELECT * FROM {name}")  # noqa: S608
        return self.spark.table(name)

    def keep(self, states: tuple[State, ...]) -> None:
        # The states Spark names stay the previous epoch's: a relation read after this
        # (the view's change) reads the states it was defined over, and each state's
        # write reads nothing another writes, so they run at once: on two cores a small
        # write leaves them mostly idle while Spark plans and commits it.
        def kept(s: State) -> None:
            if s.grows is None:
                self.states.save(s.name, self.table(s.next))
                return
            names = tuple(n for n in self.table(s.grows).columns if n != WEIGHT)
            adds = self.sql(consolidated(names, f"SELECT * FROM {s.grows}"))  # noqa: S608
            self.states.append(s.name, adds, self.table(s.next))

        self.concurrently(*[functools.partial(kept, s) for s in states])


#: the tokens of a Spark SQL statement that may hold a name: string literals, quoted
#: identifiers and comments (copied as they are), unquoted words, and braces
_TOKENS = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`]|``)*`"""
                     r"|--[^\n]*|/\*.*?\*/|[A-Za-z_][A-Za-z0-9_]*|[{}]", re.S)


def bind(sql: str, held: dict[str, Any], frames: dict[str, Any]) -> str:
    """``sql`` as a template of Spark's SQL with DataFrame arguments: each unquoted name
    of a relation in ``held`` becomes an argument (added to ``frames``), every other
    brace doubled. Only unquoted words are names here: the rules write relations
    unquoted and columns quoted, so a column, a literal or a comment is never taken for a
    relation."""
    if not held:
        return sql
    keys: dict[str, str] = {}

    def token(m: re.Match[str]) -> str:
        t = m.group(0)
        if t in "{}":
            return t * 2
        if t[0] in "'\"`-/":
            return t.replace("{", "{{").replace("}", "}}")
        if t in held:
            if t not in keys:
                keys[t] = f"r{len(keys)}"
                frames[keys[t]] = held[t]
            return "{" + keys[t] + "}"
        return t

    return _TOKENS.sub(token, sql)


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
