"""Statements defined and not yet run: an engine that pays for every statement it sends
(Spark Connect: a round trip to analyse it, another for its temporary view, a third to
drop it) keeps a statement as its SQL until a query that reads it runs, and that query
holds it, and every deferred statement it reads in turn, as a common table expression.

A deferred statement names the relations it reads as they are when the query that holds
it runs: an engine defers only statements whose inputs stay as they are until then (the
inputs' changes, the relations computed once, the states as the previous epoch kept them).
"""

from __future__ import annotations

from checkpointing.ivm.rules import q, relations_read


class Deferred:
    """Deferred statements, in the order they were defined (each reads only earlier ones
    or relations the engine holds). Which earlier statements one reads is found once, when
    it is added, not each time a query folds it in."""

    def __init__(self) -> None:
        self.statements: dict[str, str] = {}
        #: the deferred statements each one reads directly
        self._reads: dict[str, list[str]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.statements

    def add(self, name: str, sql: str) -> None:
        self._reads[name] = self._direct(sql)
        self.statements[name] = sql

    def pop(self, name: str) -> str:
        """Remove deferred statement ``name`` (defined by the engine by other means) and
        return it; later statements read it by its name."""
        for read in self._reads.values():
            if name in read:
                read.remove(name)
        del self._reads[name]
        return self.statements.pop(name)

    def clear(self) -> None:
        self.statements.clear()
        self._reads.clear()

    def _direct(self, sql: str) -> list[str]:
        return list(dict.fromkeys(relations_read(sql, self.statements)))

    def reads(self, sql: str) -> list[str]:
        """The deferred statements ``sql`` reads, directly or through each other, in the
        order they were defined."""
        needed: set[str] = set()
        todo = self._direct(sql)
        while todo:
            name = todo.pop()
            if name not in needed:
                needed.add(name)
                todo.extend(self._reads[name])
        return [n for n in self.statements if n in needed]

    def fused(self, sql: str) -> str:
        """``sql`` with the deferred statements it reads as common table expressions
        before it: one query that runs without them defined."""
        read = self.reads(sql)
        if not read:
            return sql
        return "WITH " + ", ".join(f"{q(n)} AS ({self.statements[n]})" for n in read) + \
            f" {sql}"
