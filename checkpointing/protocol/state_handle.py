"""State handles: what a task wrote for an epoch, enough to restore it without
recomputation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from checkpointing.errors import MalformedDocument
from checkpointing.json_types import JsonObject
from checkpointing.protocol.table_inputs import TableVersion, versions_from_json, versions_to_json


@dataclass(frozen=True)
class FileRef:
    """One stored file: logical name inside the task's state, URI, size and sha256."""

    name: str
    uri: str
    size: int
    sha256: str
    shared: bool = False

    def to_json(self) -> JsonObject:
        return {"name": self.name, "uri": self.uri, "size": self.size,
                "sha256": self.sha256, "shared": self.shared}

    @classmethod
    def from_json(cls, d: JsonObject) -> FileRef:
        return cls(d["name"], d["uri"], int(d["size"]), d["sha256"], bool(d.get("shared", False)))


@dataclass(frozen=True)
class OutputRef:
    """A staged output: published when the epoch completes."""

    files: tuple[FileRef, ...]
    rows: int | None = None
    meta: JsonObject = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"files": [f.to_json() for f in self.files], "rows": self.rows, "meta": self.meta}

    @classmethod
    def from_json(cls, d: JsonObject) -> OutputRef:
        return cls(tuple(FileRef.from_json(f) for f in d.get("files", [])), d.get("rows"),
                   dict(d.get("meta") or {}))


@dataclass(frozen=True)
class StateHandle:
    """A task's snapshot for one epoch (Flink's state handle), stored in its ack."""

    task_id: str
    epoch_id: int
    attempt: int
    files: tuple[FileRef, ...] = ()
    outputs: dict[str, OutputRef] = field(default_factory=dict)
    offsets: Any = None
    row_counts: dict[str, int] = field(default_factory=dict)
    metrics: JsonObject = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    bytes_written: int = 0
    restored_from: JsonObject = field(default_factory=dict)
    delivery: str = "exactly_once"
    #: (1.11) per table input, the version its state has consumed up to (PROTOCOL 6.14):
    #: in JSON ``{input name: {"version": int, "snapshot_id": int}}``
    table_offsets: dict[str, TableVersion] = field(default_factory=dict)

    @property
    def outputs_staged_bytes(self) -> int:
        """Of ``bytes_written``, what the attempt staged as outputs for publication (the
        job runtime records it in the metrics); the rest is state it uploaded."""
        return int(self.metrics.get("outputs_staged_bytes", 0) or 0)

    @property
    def state_bytes_uploaded(self) -> int:
        """Of ``bytes_written``, the state files the attempt uploaded: the incremental size
        of Flink's checkpoints, which holds no sink output."""
        return max(0, self.bytes_written - self.outputs_staged_bytes)

    @property
    def state_size(self) -> int:
        """Total bytes of the state files the handle references."""
        return sum(f.size for f in self.files)

    def all_files(self) -> list[FileRef]:
        """State files and output files alike."""
        out = list(self.files)
        for o in self.outputs.values():
            out.extend(o.files)
        return out

    def checkpoint_files(self) -> list[FileRef]:
        """The files checkpoint storage keeps for this handle: state files and staged
        outputs, not the data files of table outputs (PROTOCOL 6.12), which belong to their
        table once committed (its VACUUM removes them; a restore never reads them)."""
        out = list(self.files)
        for o in self.outputs.values():
            if "table" not in o.meta:
                out.extend(o.files)
        return out

    def to_json(self) -> JsonObject:
        return {
            "task_id": self.task_id, "epoch_id": self.epoch_id, "attempt": self.attempt,
            "files": [f.to_json() for f in self.files],
            "outputs": {k: v.to_json() for k, v in self.outputs.items()},
            "offsets": self.offsets, "row_counts": self.row_counts, "metrics": self.metrics,
            "timings": self.timings, "bytes_written": self.bytes_written,
            "restored_from": self.restored_from, "delivery": self.delivery,
            "table_offsets": versions_to_json(self.table_offsets),
        }

    @classmethod
    def from_json(cls, d: JsonObject, key: str = "state handle") -> StateHandle:
        try:
            return cls(
                task_id=d["task_id"], epoch_id=int(d["epoch_id"]), attempt=int(d["attempt"]),
                files=tuple(FileRef.from_json(f) for f in d.get("files", [])),
                outputs={k: OutputRef.from_json(v) for k, v in (d.get("outputs") or {}).items()},
                offsets=d.get("offsets"), row_counts=dict(d.get("row_counts") or {}),
                metrics=dict(d.get("metrics") or {}), timings=dict(d.get("timings") or {}),
                bytes_written=int(d.get("bytes_written", 0)),
                restored_from=dict(d.get("restored_from") or {}),
                delivery=d.get("delivery", "exactly_once"),
                table_offsets=versions_from_json(d.get("table_offsets")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedDocument(f"malformed state handle in {key}: {exc!r}") from None
