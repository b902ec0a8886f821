"""Exceptions of the checkpointing library.

Every message is one line that names what is wrong and where, so a CLI or a task log can
print ``str(exc)`` as is.
"""


class CheckpointError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidId(CheckpointError, ValueError):
    """A pipeline, task, lineage or savepoint id is empty or unsafe."""


class StorageError(CheckpointError):
    """The storage backend failed (unreachable, denied, missing bucket)."""


class NotFound(StorageError):
    """The key does not exist."""


class PreconditionFailed(StorageError):
    """A conditional write lost: another writer created or changed the object first."""


class MalformedDocument(CheckpointError):
    """A stored document is not valid JSON or lacks required fields; it is left untouched."""


class UnsupportedVersion(CheckpointError):
    """A stored document was written under a protocol major version this reader lacks."""


class EpochNotFound(CheckpointError):
    """No barrier exists for the epoch id."""


class EpochNotKept(EpochNotFound):
    """The epoch was allocated, and none of its files is left: retention deleted them."""


class UnknownTask(CheckpointError):
    """The task is not in the epoch's plan."""


class EpochAlreadyDecided(CheckpointError):
    """The epoch is already completed or aborted; acks and declines are refused."""


class StaleAttempt(CheckpointError):
    """A newer attempt of the task exists (fencing)."""


class EpochIncomplete(CheckpointError):
    """Completion was asked for but some planned tasks have not acknowledged."""


class PolicyViolation(CheckpointError):
    """Beginning an epoch now would break a configured policy."""


class TooManyConcurrentEpochs(PolicyViolation):
    """max_concurrent_epochs pending epochs exist already."""


class MinPauseNotElapsed(PolicyViolation):
    """The previous epoch started less than min_pause_seconds ago."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class PromotingBackfillRunning(PolicyViolation):
    """(1.4) A backfill that will continue the main line is running: main waits for it
    rather than racing it (PROTOCOL 6.1)."""


class FailureBudgetExhausted(PolicyViolation):
    """More consecutive epochs failed than tolerable_failed_epochs allows."""


class IntegrityError(CheckpointError):
    """A state file is missing, or its size or sha256 does not match its handle."""


class SavepointExists(CheckpointError):
    """A savepoint with that name exists already."""


class SavepointNotFound(CheckpointError):
    """No savepoint with that name."""


class PipelineOwnedElsewhere(CheckpointError):
    """Another DAG already checkpoints this pipeline id on this storage (1.7)."""


class EpochDrivenElsewhere(CheckpointError):
    """(1.11) Another live process drives the epoch (its lease is fresh): one driver per
    epoch."""
