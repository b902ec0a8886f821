"""Verification of an epoch's files without restoring it, and the verification record
that makes the check before every restore follow the change, not the state's size.

The record (PROTOCOL 5.16) says, for each file of a completed epoch, the size, sha256 and
the store's cheap stamp seen when a restore verified it (1.12; 1.6-1.11 recorded the etag
of a HEAD, which on a filesystem is an md5 of the bytes). A stamp changes whenever the
object is rewritten (S3's etag; a file's mtime and inode), so a file found again with the
recorded size and stamp is the file that was hashed: one HEAD or ``stat`` instead of a
download, ``Storage.parallel_checks`` at a time. Only the files an epoch added since the
record are checked by content (1.15): by the SHA-256 the store verified and kept when the
file was uploaded (S3's full-object checksum, one HEAD), else downloaded and hashed.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from checkpointing.errors import (
    CheckpointError,
    IntegrityError,
    MalformedDocument,
    NotFound,
    PreconditionFailed,
    UnsupportedVersion,
)
from checkpointing.json_types import JsonObject
from checkpointing.protocol.codec import Codec
from checkpointing.protocol.documents import now_iso, writer_identity
from checkpointing.protocol.epoch_reader import EpochReader
from checkpointing.protocol.layout import Layout
from checkpointing.protocol.state_handle import FileRef, StateHandle
from checkpointing.state.incremental import download_verified, state_file_key
from checkpointing.storage import Storage

log = logging.getLogger(__name__)


@dataclass
class VerifyReport:
    """Files checked and the problems found, one line each. ``files_checked`` were
    downloaded and hashed; ``files_checked_by_store`` matched by the store's own SHA-256
    checksum (one HEAD each); ``files_unchanged`` matched a verification record by size and
    stamp (one HEAD or ``stat`` each, or a share of a listing)."""

    epoch_id: int
    files_checked: int = 0
    bytes_checked: int = 0
    files_unchanged: int = 0
    files_checked_by_store: int = 0
    problems: list[str] = field(default_factory=list)
    #: {uri: VerifiedFile} of every file that verified, for the record
    verified: dict[str, VerifiedFile] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class VerifiedFile:
    """A file as a verification saw it: its bytes' size and sha256, the store's stamp
    (:meth:`Storage.stamp`). ``stamp`` is None for an entry of a record written before
    1.12 (it kept an etag, which a stamp is not compared with): the file is hashed."""

    size: int
    sha256: str
    stamp: str | None

    def to_json(self) -> JsonObject:
        return {"size": self.size, "sha256": self.sha256, "stamp": self.stamp}


@dataclass(frozen=True)
class VerificationRecord:
    """``epochs/<epoch>/_verified.json``: the files of a completed epoch a restore
    verified, by URI."""

    epoch_id: int
    verified_at: str
    files: dict[str, VerifiedFile]


def _build_record(d: JsonObject, key: str) -> VerificationRecord:
    files = {str(uri): VerifiedFile(int(f["size"]), str(f["sha256"]),
                                    str(f["stamp"]) if f.get("stamp") else None)
             for uri, f in d["files"].items()}
    return VerificationRecord(int(d["epoch_id"]), str(d["verified_at"]), files)


RECORD = Codec("ckpt.verified", "verification record", ("epoch_id", "verified_at", "files"),
               _build_record)


def read_record(storage: Storage, layout: Layout, epoch_id: int) -> VerificationRecord | None:
    """An epoch's verification record; None when it has none, or an unreadable one (derived
    data: the files are then hashed, and the bad record is left as it is, logged)."""
    key = layout.verified(epoch_id)
    try:
        data, _ = storage.read(key)
        return RECORD.decode(data, storage.uri(key))
    except NotFound:
        return None
    except (MalformedDocument, UnsupportedVersion) as exc:
        log.warning("ignoring %s: every file it covers is hashed again", exc)
        return None


def write_record(storage: Storage, layout: Layout, report: VerifyReport, at: float) -> bool:
    """Store what a clean verification saw, create-once; False when a record exists."""
    if not report.ok:
        raise ValueError(f"epoch {report.epoch_id} did not verify: nothing to record")
    body = {"epoch_id": report.epoch_id, "verified_at": now_iso(at),
            "files": {uri: f.to_json() for uri, f in sorted(report.verified.items())},
            "writer": writer_identity()}
    try:
        storage.create(layout.verified(report.epoch_id), RECORD.encode(body))
        return True
    except PreconditionFailed:
        return False


def verify_handles(storage: Storage, epoch_id: int, handles: dict[str, StateHandle],
                   known: dict[str, VerifiedFile] | None = None,
                   store_checksums: bool = True) -> VerifyReport:
    """Check existence, size and sha256 of every state and output file of ``handles``.
    A file in ``known`` (a verification record's files) whose size and stamp are unchanged
    is checked by that stamp alone; every other file by the SHA-256 the store recorded at
    its upload when it has one and ``store_checksums`` (S3 verified the bytes against it),
    else downloaded and hashed."""
    report = VerifyReport(epoch_id)
    known = known or {}
    files: dict[str, tuple[str, FileRef, str]] = {}  # uri -> (task, ref, key)
    for task, handle in sorted(handles.items()):
        for ref in handle.checkpoint_files():
            if ref.uri in files:
                continue
            try:
                files[ref.uri] = (task, ref, state_file_key(storage, ref))
            except IntegrityError as exc:
                report.problems.append(f"task {task}: {exc}")
    stamps = storage.stamps([key for _, _, key in files.values()])
    items = list(files.values())
    with tempfile.TemporaryDirectory(prefix="ckpt-verify-") as tmp:
        def one(i: int) -> _Outcome:
            task, ref, key = items[i]
            return _verify_one(storage, task, ref, key, stamps[key], Path(tmp) / f"f{i}",
                               known, store_checksums)

        # A store's checksum (a HEAD) or a download: a round trip each, as the stamps are.
        outcomes = storage.map_checks(one, list(range(len(items))))
    for (_, ref, _), outcome in zip(items, outcomes, strict=True):
        outcome.add_to(report, ref)
    return report


@dataclass(frozen=True)
class _Outcome:
    """How one file verified (``how``: unchanged, by_store or hashed), or its problem."""

    how: str = ""
    seen: VerifiedFile | None = None
    problem: str = ""

    def add_to(self, report: VerifyReport, ref: FileRef) -> None:
        if self.problem:
            report.problems.append(self.problem)
            return
        if self.how == "unchanged":
            report.files_unchanged += 1
        elif self.how == "by_store":
            report.files_checked_by_store += 1
        else:
            report.files_checked += 1
            report.bytes_checked += ref.size
        if self.seen is not None:  # every outcome but a problem saw the file
            report.verified[ref.uri] = self.seen


def _verify_one(storage: Storage, task: str, ref: FileRef, key: str,
                stamp: tuple[int, str] | None, target: Path,
                known: dict[str, VerifiedFile], store_checksums: bool) -> _Outcome:
    try:
        if stamp is None:
            raise IntegrityError(f"state file {ref.name!r} is missing: {ref.uri}")
        size, now = stamp
        seen = VerifiedFile(ref.size, ref.sha256, now)
        if known.get(ref.uri) == seen and size == ref.size:
            return _Outcome("unchanged", seen)
        if store_checksums and size == ref.size and \
                storage.stored_sha256(key) == (ref.sha256, ref.size):
            # Rewritten bytes carry their own checksum or none: a match is these bytes.
            return _Outcome("by_store", seen)
        download_verified(storage, ref, target)
        return _Outcome("hashed", seen)
    except (IntegrityError, CheckpointError) as exc:
        return _Outcome(problem=f"task {task}: {exc}")
    finally:
        target.unlink(missing_ok=True)


def verify_epoch(epochs: EpochReader, epoch_id: int) -> VerifyReport:
    """Verify every file a completed epoch references, hashing each (``ckpt verify``: an
    audit reads every byte, the store's checksums are not taken for them)."""
    return verify_handles(epochs.storage, epoch_id, epochs.completed_handles(epoch_id),
                          store_checksums=False)
