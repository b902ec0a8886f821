"""The epoch's decision read from a trigger: off the triggerer's event loop, and storage
that does not answer for now is "not decided yet" (the trigger keeps watching)."""

from __future__ import annotations

import asyncio
import logging

from checkpointing import Coordinator
from checkpointing.decision import Decision
from checkpointing.errors import CheckpointError, MalformedDocument


async def read_decision(coord: Coordinator, epoch_id: int,
                        log: logging.Logger | logging.LoggerAdapter) -> Decision | None:
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
