"""One epoch of an incremental view on an engine that runs SQL: the inputs' changes in,
the view's changes out, the operators' states carried to the next epoch.

The engine is a narrow interface (:class:`Engine`): Spark in a job (its relations temporary
views, its states the task's checkpointed state), DuckDB in the planner's own tests."""

from __future__ import annotations

from typing import Protocol

from checkpointing.ivm.rules import Program, State, Step


class Engine(Protocol):
    """Where a program's statements run. Statements are Spark SQL; an engine of another
    dialect translates them."""

    def exists(self, name: str) -> bool:
        """Whether relation ``name`` is defined (a state kept by an earlier epoch)."""

    def define(self, name: str, sql: str, once: bool = False) -> None:
        """Define relation ``name`` as the result of ``sql``; ``once``: later statements
        read it several times, so an engine whose relations are views computes it now."""

    def keep(self, states: tuple[State, ...]) -> None:
        """Make each state's ``next`` relation the state ``name`` for the next epoch, all
        or none (a state that ``grows`` may be kept as its batches, :class:`State`)."""


def run_epoch(prog: Program, engine: Engine) -> str:
    """Run one epoch of ``prog`` (its inputs' change relations already defined); returns
    the relation holding the view's changes. The states are replaced only after every
    statement ran, so a failure leaves the previous epoch's states as they were."""
    for step in prog.steps:
        if isinstance(step, State):
            if not engine.exists(step.name):
                engine.define(step.name, step.empty)
        elif isinstance(step, Step):
            engine.define(step.name, step.sql, once=step.shared)
    engine.keep(prog.states)
    return prog.out
