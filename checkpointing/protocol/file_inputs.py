"""Landed files as a view's input (PROTOCOL 6.15, 1.27): a prefix of the data root whose
files (CSV, JSON lines or Parquet) a view reads as one table of a declared schema.

The view task consumes each file once, as a file source does (the runtime's
:func:`~spark_jobs.runtime.file_source.new_input`: which files are new since the offsets
the previous epoch recorded): a new file's rows are added to the input, and a file
rewritten in place (a correction) retracts the rows its earlier content added, kept in the
task's state for that, and adds its new ones. So the input is always the rows of the
files' latest contents, and its change each epoch is what the files landed since changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpointing.json_types import JsonObject

#: the readers a file input may name (Spark's data sources), and each one's file suffix
FORMATS = {"csv": ".csv", "json": ".json", "parquet": ".parquet"}
#: the reader options a format is read with unless the input says otherwise
DEFAULT_OPTIONS = {"csv": {"header": "true"}}


@dataclass(frozen=True)
class FileInput:
    """Files landed under ``prefix`` of the data root, read as one table.

    :param prefix: where the files land, relative to the data root (``landing/orders/``);
        a file's name may carry its day (``2013-01-02.csv``), which bounds what an epoch
        with a data interval reads, as for every file source.
    :param schema: the rows' columns as Spark DDL (``"id BIGINT, amount DECIMAL(12,2)"``):
        declared, not inferred, so that every epoch plans the view over the same types
        whatever the files it reads.
    :param format: ``csv`` (with a header line unless ``options`` say otherwise), ``json``
        (JSON lines) or ``parquet``.
    :param options: the reader's options (Spark's ``DataFrameReader.options``).
    """

    prefix: str
    schema: str
    format: str = "csv"
    options: dict[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"a file input's format is one of {', '.join(sorted(FORMATS))}, "
                             f"not {self.format!r}")
        if not self.prefix or self.prefix.startswith("/") or ".." in self.prefix.split("/"):
            raise ValueError(f"a file input's prefix is a path inside the data root, not "
                             f"{self.prefix!r}")
        if not self.schema.strip():
            raise ValueError("a file input needs its schema (Spark DDL: 'id BIGINT, ...')")

    @property
    def suffix(self) -> str:
        """The ending of the files the input reads (others under the prefix are left)."""
        return FORMATS[self.format]

    @property
    def reader_options(self) -> dict[str, str]:
        """The options the files are read with: a CSV's header line by default."""
        return {**DEFAULT_OPTIONS.get(self.format, {}), **self.options}

    def to_json(self) -> JsonObject:
        d: JsonObject = {"prefix": self.prefix, "schema": self.schema, "format": self.format}
        if self.options:
            d["options"] = dict(self.options)
        return d

    @classmethod
    def from_json(cls, d: JsonObject) -> FileInput:
        return cls(str(d["prefix"]), str(d["schema"]), str(d.get("format") or "csv"),
                   {str(k): str(v) for k, v in (d.get("options") or {}).items()})
