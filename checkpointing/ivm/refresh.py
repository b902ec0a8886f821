"""The refresh planner: per view and epoch, maintain it from the inputs' changes
(incremental) or recompute it whole (full), and say why (PROTOCOL 6.15).

A full refresh is forced when the query has no incremental plan, when there is no kept
state to maintain (the first epoch, a changed query) and when an input is read whole. Else
the choice is by cost, as Enzyme's planner does: each epoch records what its refresh cost
per byte (of the changes for an incremental refresh, of the inputs for a full one); with
both rates known, the cheaper estimate wins; before that, a change above a fraction of the
inputs' bytes is recomputed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from checkpointing.json_types import JsonObject

Mode = Literal["incremental", "full"]


@dataclass(frozen=True)
class InputChange:
    """One input's change this epoch: read ``whole`` (no consumed version), whether its
    change set has any file (a deletion vector's change names its data file too), the bytes
    of the files it adds and removes, and the input's bytes after it."""

    name: str
    whole: bool
    changed: bool
    changed_bytes: int
    input_bytes: int


@dataclass(frozen=True)
class RefreshCosts:
    """Milliseconds per byte an earlier epoch measured: an incremental refresh per byte of
    its changes, a full one per byte of its inputs (None: not measured yet)."""

    incremental_ms_per_byte: float | None = None
    full_ms_per_byte: float | None = None

    def observed(self, mode: Mode, ms: float, size: int) -> RefreshCosts:
        """These costs with this epoch's measurement of ``mode`` (``size``: the bytes it
        was per) replacing the earlier one."""
        if size <= 0:
            return self
        rate = ms / size
        if mode == "incremental":
            return RefreshCosts(rate, self.full_ms_per_byte)
        return RefreshCosts(self.incremental_ms_per_byte, rate)

    def to_json(self) -> JsonObject:
        return {"incremental_ms_per_byte": self.incremental_ms_per_byte,
                "full_ms_per_byte": self.full_ms_per_byte}

    @classmethod
    def from_json(cls, d: JsonObject | None) -> RefreshCosts:
        d = d or {}
        inc, full = d.get("incremental_ms_per_byte"), d.get("full_ms_per_byte")
        return cls(None if inc is None else float(inc), None if full is None else float(full))


@dataclass(frozen=True)
class Refresh:
    """The planner's choice for one epoch and its reason (one line)."""

    mode: Mode
    reason: str
    changed_bytes: int = 0
    input_bytes: int = 0
    estimated_incremental_ms: float | None = None
    estimated_full_ms: float | None = None

    def to_json(self) -> JsonObject:
        d: JsonObject = {"refresh": self.mode, "reason": self.reason,
                         "changed_bytes": self.changed_bytes, "input_bytes": self.input_bytes}
        if self.estimated_incremental_ms is not None:
            d["estimated_incremental_ms"] = round(self.estimated_incremental_ms, 1)
        if self.estimated_full_ms is not None:
            d["estimated_full_ms"] = round(self.estimated_full_ms, 1)
        return d


@dataclass(frozen=True)
class ViewRecord:
    """What a view task keeps in its state handle (its ``offsets``) for the next epoch:
    the query its states belong to (:func:`query_id`), each input's bytes, the measured
    costs, and the result's schema (Spark's JSON of it: an epoch with no change stages
    its output without running the query)."""

    query: str
    input_bytes: dict[str, int] = field(default_factory=dict)
    costs: RefreshCosts = RefreshCosts()
    schema: str = ""

    def to_json(self) -> JsonObject:
        return {"query_sha256": self.query, "input_bytes": dict(self.input_bytes),
                "costs": self.costs.to_json(), "schema": self.schema}

    @classmethod
    def from_json(cls, d: JsonObject | None) -> ViewRecord | None:
        if not d or "query_sha256" not in d:
            return None
        return cls(str(d["query_sha256"]), {str(k): int(v) for k, v in
                                             (d.get("input_bytes") or {}).items()},
                   RefreshCosts.from_json(d.get("costs")), str(d.get("schema") or ""))


#: the layout of the states the rules keep; a change of it (a column a rule keeps, or no
#: longer keeps) makes the next refresh a full one, as a changed query does: states kept
#: by another layout are not read
STATE_LAYOUT = 2


def query_id(sql: str) -> str:
    """What identifies a view's query and its states' layout across epochs (a SHA-256)."""
    return hashlib.sha256(f"{STATE_LAYOUT}\n{sql}".encode()).hexdigest()


def choose(*, fallback: str | None, kept: ViewRecord | None, query: str,
           inputs: list[InputChange], costs: RefreshCosts,
           full_above: float) -> Refresh:
    """The refresh of this epoch (module docstring). ``fallback``: why the query has no
    incremental plan (None: it has one); ``kept``: the previous epoch's record (None: no
    state); ``query``: this epoch's :func:`query_id`."""
    changed = sum(i.changed_bytes for i in inputs)
    total = sum(i.input_bytes for i in inputs)

    def full(reason: str, **est: float | None) -> Refresh:
        return Refresh("full", reason, changed, total, **est)

    if fallback is not None:
        return full(f"not incremental: {fallback}")
    if kept is None:
        return full("first epoch: no kept state, built from the inputs' content")
    if kept.query != query:
        return full("the query changed since the states were kept (or the layout they are kept in)")
    whole = [i.name for i in inputs if i.whole]
    if whole:
        return full(f"input(s) {', '.join(whole)} read whole (no version consumed before)")
    if not any(i.changed for i in inputs):
        return Refresh("incremental", "no input changed: the states are carried", 0, total)
    if costs.incremental_ms_per_byte is not None and costs.full_ms_per_byte is not None:
        inc = changed * costs.incremental_ms_per_byte
        rec = total * costs.full_ms_per_byte
        if rec < inc:
            return full(f"a recompute is estimated cheaper ({rec:.0f} ms over "
                        f"{total:,} bytes) than maintaining {changed:,} bytes of changes "
                        f"({inc:.0f} ms), from earlier epochs' costs",
                        estimated_incremental_ms=inc, estimated_full_ms=rec)
        return Refresh("incremental", f"maintaining {changed:,} bytes of changes is "
                       f"estimated cheaper ({inc:.0f} ms) than a recompute over "
                       f"{total:,} bytes ({rec:.0f} ms), from earlier epochs' costs",
                       changed, total, inc, rec)
    share = changed / total if total else 1.0
    if share > full_above:
        return full(f"the changes are {share:.0%} of the inputs' bytes (above "
                    f"{full_above:.0%}; no cost recorded yet)")
    return Refresh("incremental", f"the changes are {share:.1%} of the inputs' bytes "
                   f"(at most {full_above:.0%}; no cost recorded yet)", changed, total)
