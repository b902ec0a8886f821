"""The epoch's decision read from a trigger: off the triggerer's event loop, and storage
that does not answer for now is "not decided yet" (the trigger keeps watching)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from checkpointing import Coordinator
from checkpointing.errors import CheckpointError, MalformedDocument
from checkpointing.protocol.decision import Decision

#: The longest a trigger waits between two reads of the decision.
MAX_POLL_SECONDS = 30.0


def decision_poll_seconds(timeout_seconds: float) -> float:
    """How often a trigger reads an epoch's decision: its timeout's twentieth, 1-30 s."""
    return min(MAX_POLL_SECONDS, max(1.0, timeout_seconds / 20))



class Log(Protocol):
    """A logger, as the standard library's and Airflow's triggers' both are."""

    def warning(self, msg: str, /, *args: Any, **kwargs: Any) -> Any: ...


async def read_decision(coord: Coordinator, epoch_id: int,
                        log: Log) -> Decision | None:
    """The decision of ``epoch_id``, None while undecided or unreadable.

    :raises MalformedDocument: a decision document that cannot be read is an error, not a
        pending epoch.
    """
    try:
        return await asyncio.to_thread(coord.decision, epoch_id)
    except MalformedDocument:
        raise
    except CheckpointError as exc:  # storage unreachable for now: keep watching
        log.warning("epoch %d: cannot read its outcome yet: %s", epoch_id, exc)
        return None
