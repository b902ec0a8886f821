"""Verification of an epoch's files without restoring it."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CheckpointError, IntegrityError
from .incremental import _download_verified
from .state_handle import FileRef, StateHandle
from .storage import Storage


@dataclass
class VerifyReport:
    """Files checked and the problems found, one line each."""

    epoch_id: int
    files_checked: int = 0
    bytes_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_handles(storage: Storage, epoch_id: int,
                   handles: dict[str, StateHandle]) -> VerifyReport:
    """Check existence, size and sha256 of every state and output file of ``handles``."""
    report = VerifyReport(epoch_id)
    with tempfile.TemporaryDirectory(prefix="ckpt-verify-") as tmp:
        for task, handle in sorted(handles.items()):
            for ref in handle.all_files():
                _verify_one(storage, task, ref, Path(tmp) / "f", report)
    return report


def _verify_one(storage: Storage, task: str, ref: FileRef, target: Path,
                report: VerifyReport) -> None:
    try:
        _download_verified(storage, ref, target)
        report.files_checked += 1
        report.bytes_checked += ref.size
    except (IntegrityError, CheckpointError) as exc:
        report.problems.append(f"task {task}: {exc}")
    finally:
        target.unlink(missing_ok=True)


def verify_epoch(coordinator, epoch_id: int) -> VerifyReport:  # noqa: ANN001
    """Verify every file a completed epoch references."""
    return verify_handles(coordinator.storage, epoch_id, coordinator.completed_handles(epoch_id))
