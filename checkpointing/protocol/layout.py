"""Key layout of a pipeline's checkpoint storage (docs/PROTOCOL.md, section 4)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from checkpointing.ids import validate_attempt, validate_epoch_id, validate_id

_ATTEMPT_OBJ_RE = re.compile(r"attempt-(\d{4})\.(start|ack|decline|operation)$")


def epoch_dir_name(epoch_id: int) -> str:
    return f"{validate_epoch_id(epoch_id):010d}"


@dataclass(frozen=True)
class Layout:
    """All keys of one pipeline, relative to the storage root."""

    pipeline_id: str

    def __post_init__(self) -> None:
        validate_id(self.pipeline_id, "pipeline id")

    @property
    def base(self) -> str:
        return f"{self.pipeline_id}/"

    @property
    def counter(self) -> str:
        return f"{self.base}counter.json"

    @property
    def epochs_prefix(self) -> str:
        return f"{self.base}epochs/"

    def epoch_prefix(self, epoch_id: int) -> str:
        return f"{self.epochs_prefix}{epoch_dir_name(epoch_id)}/"

    def epoch_summary(self, epoch_id: int) -> str:
        """A decided epoch's statistics, written once (PROTOCOL 5.7, 1.5)."""
        return f"{self.epoch_prefix(epoch_id)}_summary.json"

    def barrier(self, epoch_id: int) -> str:
        return f"{self.epoch_prefix(epoch_id)}barrier.json"

    def verified(self, epoch_id: int) -> str:
        """What a restore verified of a completed epoch's files (PROTOCOL 5.16, 1.6)."""
        return f"{self.epoch_prefix(epoch_id)}_verified.json"

    def metadata(self, epoch_id: int) -> str:
        return f"{self.epoch_prefix(epoch_id)}_metadata"

    def run_index_prefix(self, lineage: str, run_id: str) -> str:
        """Where the epochs a run opened are indexed (1.3): run ids are free text (Airflow's
        contain ':' and '+'), so the key holds their sha256."""
        digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:40]
        return f"{self.base}runs/{validate_id(lineage, 'lineage')}/{digest}/"

    def run_index_entry(self, lineage: str, run_id: str, epoch_id: int) -> str:
        return f"{self.run_index_prefix(lineage, run_id)}{epoch_dir_name(epoch_id)}"

    def lease(self, epoch_id: int) -> str:
        """The liveness lease of an epoch driven by one process (1.3)."""
        return f"{self.epoch_prefix(epoch_id)}lease.json"

    def legacy_alert(self, epoch_id: int) -> str:
        """Where protocol 1.1-1.2 wrote the alert (inside the epoch, deleted with it)."""
        return f"{self.epoch_prefix(epoch_id)}alert.json"

    @property
    def history_prefix(self) -> str:
        return f"{self.base}history/"

    def history_entry_prefix(self, epoch_id: int) -> str:
        return f"{self.history_prefix}{epoch_dir_name(epoch_id)}/"

    def alert(self, epoch_id: int) -> str:
        """The alert of an aborted epoch (1.3: in its history entry, which outlives it)."""
        return f"{self.history_entry_prefix(epoch_id)}alert.json"

    def failure_record(self, epoch_id: int) -> str:
        return f"{self.history_entry_prefix(epoch_id)}failure.json"

    def kept_summary(self, epoch_id: int) -> str:
        """A completed epoch's summary, kept when retention deletes its files (1.16)."""
        return f"{self.history_entry_prefix(epoch_id)}summary.json"

    def tasks_prefix(self, epoch_id: int) -> str:
        return f"{self.epoch_prefix(epoch_id)}tasks/"

    def task_prefix(self, epoch_id: int, task_id: str) -> str:
        return f"{self.tasks_prefix(epoch_id)}{validate_id(task_id, 'task id')}/"

    def attempt_object(self, epoch_id: int, task_id: str, attempt: int, kind: str) -> str:
        assert kind in ("start", "ack", "decline", "operation")
        attempt_s = f"attempt-{validate_attempt(attempt):04d}"
        return f"{self.task_prefix(epoch_id, task_id)}{attempt_s}.{kind}"

    def listing(self, epoch_id: int, source: str) -> str:
        """The listing of landed files the epoch reads from ``source`` (a
        :func:`~checkpointing.protocol.listings.listing_source` digest; 5.21, 1.28)."""
        if not re.fullmatch(r"[0-9a-f]{64}", source):
            raise ValueError(f"not a sha256 hex digest: {source!r}")
        return f"{self.epoch_prefix(epoch_id)}listings/{source}.json"

    def state_prefix(self, epoch_id: int, task_id: str, attempt: int) -> str:
        validate_id(task_id, "task id")
        attempt_s = f"attempt-{validate_attempt(attempt):04d}"
        return f"{self.epoch_prefix(epoch_id)}state/{task_id}/{attempt_s}/"

    def staging_prefix(self, epoch_id: int, task_id: str, attempt: int) -> str:
        validate_id(task_id, "task id")
        return (f"{self.epoch_prefix(epoch_id)}staging/{task_id}/"
                f"attempt-{validate_attempt(attempt):04d}/")

    @property
    def shared_prefix(self) -> str:
        return f"{self.base}shared/"

    def shared(self, sha256: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return f"{self.shared_prefix}{sha256[:2]}/{sha256}"

    def lineage_origin(self, lineage: str) -> str:
        return f"{self.base}lineages/{validate_id(lineage, 'lineage')}/origin.json"

    def stale_alert(self, lineage: str, last_epoch_id: int) -> str:
        """The staleness alert of a lineage whose last completed epoch is ``last_epoch_id``
        (1.13): one per stale period."""
        return (f"{self.base}lineages/{validate_id(lineage, 'lineage')}/"
                f"stale-after-{epoch_dir_name(last_epoch_id)}.json")

    def stale_resolved(self, lineage: str, last_epoch_id: int) -> str:
        """That stale period's end: an epoch completed again (1.17), once."""
        return self.stale_alert(lineage, last_epoch_id).removesuffix(".json") + \
            ".resolved.json"

    def stale_alerts_prefix(self, lineage: str) -> str:
        """Where a lineage's staleness alerts and their ends are (1.17)."""
        return f"{self.base}lineages/{validate_id(lineage, 'lineage')}/stale-after-"

    def lineage_promotion(self, lineage: str) -> str:
        return f"{self.base}lineages/{validate_id(lineage, 'lineage')}/promotion.json"

    @property
    def savepoints_prefix(self) -> str:
        return f"{self.base}savepoints/"

    def savepoint(self, name: str) -> str:
        return f"{self.savepoints_prefix}{validate_id(name, 'savepoint name')}.json"

    @property
    def manifest(self) -> str:
        return f"{self.base}published/manifest.json"

    def parse_epoch_dir(self, prefix: str) -> int | None:
        """The epoch id of an ``epochs/<id>/`` prefix, or None for anything else."""
        name = prefix[len(self.epochs_prefix):].rstrip("/")
        return int(name) if len(name) == 10 and name.isdigit() and int(name) > 0 else None

    def parse_history_dir(self, prefix: str) -> int | None:
        """The epoch id of a ``history/<id>/`` prefix, or None for anything else."""
        name = prefix[len(self.history_prefix):].rstrip("/")
        return int(name) if len(name) == 10 and name.isdigit() and int(name) > 0 else None

    @staticmethod
    def parse_attempt_object(key: str) -> tuple[str, int, str] | None:
        """(task_id, attempt, kind) of a ``tasks/<task>/attempt-NNNN.kind`` key, else None."""
        parts = key.rsplit("/", 2)
        if len(parts) != 3:
            return None
        m = _ATTEMPT_OBJ_RE.match(parts[2])
        return (parts[1], int(m.group(1)), m.group(2)) if m else None
