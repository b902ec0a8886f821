"""A task that maintains an incremental view (PROTOCOL 5.2, 1.22): its query and its output,
carried in the barrier's plan so that every attempt of an epoch (in any process, under
spark-submit too) maintains the view the epoch began with.

The query is Spark SQL over the task's table inputs, named as the plan names them; the
output is a table the epoch's completion commits (PROTOCOL 6.12). How the query is
maintained (:mod:`checkpointing.ivm`) is the job's business, not the plan's."""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpointing.ids import validate_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.file_inputs import FileInput

#: the fraction of an input's bytes above which a change is refreshed by a full recompute
#: when no earlier epoch recorded what each refresh costs (PROTOCOL 6.15)
DEFAULT_FULL_REFRESH_ABOVE = 0.5


@dataclass(frozen=True)
class ViewTask:
    """What a view task maintains.

    :param sql: the view's query (Spark SQL, one ``SELECT``), over the task's table inputs.
    :param output: the name of its table output (an Airflow Asset when the epoch publishes).
    :param table: where the output lives: a table output's JSON (PROTOCOL 6.12) without its
        mode, which the job derives from the view (a keyed merge when rows have a key).
    :param keys: the output's key columns when the query does not say them (no GROUP BY).
    :param verify_every: every this many epochs, the job recomputes the view in full at
        the pinned versions and compares it with the maintained one (0: never).
    :param full_refresh_above: without recorded costs, a change of more than this fraction
        of the inputs' bytes is refreshed by a full recompute.
    :param views: inputs that are the views of upstream tasks of the plan (input name ->
        task id): read from that task's handle of the same epoch (its change, or its whole
        result on a first read), not from its table.
    :param files: inputs that are files landed under a prefix of the data root (input
        name -> :class:`~checkpointing.protocol.file_inputs.FileInput`, 1.27).
    """

    sql: str
    output: str
    table: JsonObject
    keys: tuple[str, ...] = ()
    verify_every: int = 0
    full_refresh_above: float = DEFAULT_FULL_REFRESH_ABOVE
    views: dict[str, str] = field(default_factory=dict, hash=False)
    files: dict[str, FileInput] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        validate_id(self.output, "view output name")
        for name, task in self.views.items():
            validate_id(name, "view input name")
            validate_id(task, "task id")
        for name in self.files:
            validate_id(name, "view input name")
            if name in self.views:
                raise ValueError(f"view input {name!r} is named both as a view and as files")
        if not self.sql.strip():
            raise ValueError("a view needs its query (sql=...)")
        if "location" not in self.table:
            raise ValueError("a view's table needs a location")
        if self.verify_every < 0:
            raise ValueError("verify_every must be 0 (never) or a number of epochs")
        if not 0 < self.full_refresh_above <= 1:
            raise ValueError("full_refresh_above must be a fraction in (0, 1]")

    def to_json(self) -> JsonObject:
        d: JsonObject = {"sql": self.sql, "output": self.output, "table": dict(self.table)}
        if self.keys:
            d["keys"] = list(self.keys)
        if self.verify_every:
            d["verify_every"] = self.verify_every
        if self.full_refresh_above != DEFAULT_FULL_REFRESH_ABOVE:
            d["full_refresh_above"] = self.full_refresh_above
        if self.views:
            d["views"] = dict(self.views)
        if self.files:
            d["files"] = {n: f.to_json() for n, f in self.files.items()}
        return d

    @classmethod
    def from_json(cls, d: JsonObject) -> ViewTask:
        return cls(str(d["sql"]), str(d["output"]), dict(d["table"]),
                   tuple(d.get("keys") or ()), int(d.get("verify_every") or 0),
                   float(d.get("full_refresh_above", DEFAULT_FULL_REFRESH_ABOVE)),
                   {str(k): str(v) for k, v in (d.get("views") or {}).items()},
                   {str(k): FileInput.from_json(v) for k, v in (d.get("files") or {}).items()})
