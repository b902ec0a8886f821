"""The refresh planner: per view and epoch, maintain it from the inputs' changes
(incremental) or recompute it whole (full), and say why (PROTOCOL 6.15).

A full refresh is forced when the query has no incremental plan, when there is no kept
state to maintain (the first epoch, a changed query) and when an input is read whole. Else
the choice is by cost, as Enzyme's planner does: each epoch records how long its refresh
took and over how many bytes (of the changes for an incremental refresh, of the inputs for
a full one); once both modes were measured, each is estimated as a fixed part plus a part
per byte (:meth:`RefreshCosts.models`) and the cheaper estimate wins; before that, a change
above a fraction of the inputs' bytes is recomputed."""

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


#: the measurements of each mode a record keeps: enough to fit a line, recent enough to
#: follow a table that grows
OBSERVATIONS = 8
#: a mode's sizes must span this factor before a line is fitted through them: measurements
#: at one size cannot tell a refresh's fixed cost from its cost per byte
SPREAD = 2.0


@dataclass(frozen=True)
class CostModel:
    """One mode's estimated milliseconds: a fixed part (a Spark job per statement, state
    and output, whatever the size) plus a part per byte."""

    fixed_ms: float
    ms_per_byte: float

    def at(self, size: int) -> float:
        return self.fixed_ms + self.ms_per_byte * size


def _fit(points: tuple[tuple[int, float], ...]) -> CostModel | None:
    """A line through ``points`` (bytes, ms) by least squares, its fixed part and slope not
    negative; None when their sizes do not span :data:`SPREAD`."""
    if len(points) < 2:
        return None
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    if max(xs) < SPREAD * min(xs):
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if slope <= 0:  # bigger changes were not dearer: the cost is its fixed part
        return CostModel(my, 0.0)
    fixed = my - slope * mx
    if fixed < 0:  # through the origin instead
        return CostModel(0.0, sum(x * y for x, y in zip(xs, ys, strict=True))
                         / sum(x * x for x in xs))
    return CostModel(fixed, slope)


def _mean(points: tuple[tuple[int, float], ...]) -> tuple[float, float]:
    return (sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points))


@dataclass(frozen=True)
class RefreshCosts:
    """What earlier epochs' refreshes cost: per mode, up to :data:`OBSERVATIONS` pairs of
    (bytes, milliseconds), the bytes being an incremental refresh's changes or a full
    one's inputs."""

    incremental: tuple[tuple[int, float], ...] = ()
    full: tuple[tuple[int, float], ...] = ()

    def observed(self, mode: Mode, ms: float, size: int) -> RefreshCosts:
        """These costs with this epoch's measurement of ``mode`` added (the oldest dropped
        beyond :data:`OBSERVATIONS`); nothing is learnt from no byte."""
        if size <= 0:
            return self
        if mode == "incremental":
            return RefreshCosts((*self.incremental, (size, ms))[-OBSERVATIONS:], self.full)
        return RefreshCosts(self.incremental, (*self.full, (size, ms))[-OBSERVATIONS:])

    def models(self) -> tuple[CostModel, CostModel] | None:
        """(incremental, full) once both modes were measured, else None.

        A mode whose sizes span :data:`SPREAD` gets the line through them. A full refresh
        measured at about one size is taken as all cost per byte (an upper bound as its
        inputs grow). An incremental one measured at about one size is taken to grow with
        its changes' bytes as a full refresh grows with its inputs', the rest of what it
        took being its fixed part: a small change is not extrapolated from a smaller one
        as if a refresh had no fixed cost."""
        if not self.incremental or not self.full:
            return None
        full = _fit(self.full)
        if full is None:
            size, ms = _mean(self.full)
            full = CostModel(0.0, ms / size)
        inc = _fit(self.incremental)
        if inc is None:
            size, ms = _mean(self.incremental)
            inc = CostModel(max(0.0, ms - full.ms_per_byte * size), full.ms_per_byte)
        return inc, full

    def to_json(self) -> JsonObject:
        return {"incremental": [[b, ms] for b, ms in self.incremental],
                "full": [[b, ms] for b, ms in self.full]}

    @classmethod
    def from_json(cls, d: JsonObject | None) -> RefreshCosts:
        """The costs of a record; one written before 1.23 (rates per byte, no sizes) gives
        none: they are measured again."""
        d = d or {}

        def points(key: str) -> tuple[tuple[int, float], ...]:
            return tuple((int(b), float(ms)) for b, ms in (d.get(key) or []))[-OBSERVATIONS:]

        return cls(points("incremental"), points("full"))


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
    models = costs.models()
    if models is not None:
        inc, rec = models[0].at(changed), models[1].at(total)
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
