"""The trigger behind each run's checkpoint watchdog (see :mod:`dag_checkpoints.shared.timeouts`).

An async poll of checkpoint storage that costs no worker slot and no triggerer thread; it
ends as soon as the epoch is decided (read from what survives retention, within about a
second of the commit step) or its deadline passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import (
    BaseTrigger,
    TaskSkippedEvent,
    TaskSuccessEvent,
    TriggerEvent,
)

from checkpointing import Coordinator
from checkpointing.errors import MalformedDocument
from checkpointing.protocol.decision import Decision
from checkpointing.protocol.documents import parse_iso

from ..hooks.checkpoint import CheckpointHook
from ..shared.settings import CheckpointSettings
from ..shared.timeouts import expire_epoch, watchdog_outcome
from .decision_read import MAX_POLL_SECONDS, read_decision
from .task_states import FINISHED, NoStateChannel, run_task_states

#: How often the trigger asks Airflow whether the run's commit step has finished (one
#: call to Airflow's API, not to storage): the watchdog then reads the decision at once.
AIRFLOW_POLL_SECONDS = 1.0
#: While the commit step runs or is about to (its trigger fired once the epoch was decided),
#: storage and Airflow are read this often: the run ends only once this watchdog does.
COMMITTING_POLL_SECONDS = 0.2
#: The commit step's states in which the decision is due or made: scheduled and queued
#: also mean "resumed by its trigger", which fires on the decision.
_COMMITTING = frozenset({"scheduled", "queued", "running"})
#: What :meth:`EpochDeadlineTrigger._commit_state` says while Airflow has not answered.
UNANSWERED = "unanswered"


class EpochDeadlineTrigger(BaseTrigger):
    """Fires when the epoch is decided or its deadline has passed, whichever comes first.

    Storage is read every ``poll_seconds`` (the deadline's twentieth, at most 30 s), every
    0.2 s while Airflow shows the commit step resumed (its trigger fires on the decision,
    usually made by the last acknowledgement) or running, and at once when it finished,
    so a run ends with its commit step instead of a storage poll
    later (PROTOCOL 6.11). A decided epoch ends the watchdog from here, without resuming
    on a worker (success, or skipped for an aborted epoch within the failure budget); an
    aborted epoch that spent the budget resumes on a worker to fail there without a retry.
    A passed deadline is enforced here too: the trigger aborts the epoch (reason
    ``timeout``) and alerts, then ends the watchdog the same way.
    Storage calls run in a worker thread of the event loop's default executor, one short
    read at a time, so a slow store never blocks the triggerer's loop.
    """

    def __init__(self, checkpoint: dict[str, Any], epoch_id: int, deadline: str,
                 poll_seconds: float = MAX_POLL_SECONDS, dag_id: str | None = None,
                 run_id: str | None = None, commit_task_id: str | None = None):
        super().__init__()
        self.checkpoint, self.epoch_id, self.deadline = checkpoint, int(epoch_id), deadline
        self.poll_seconds = float(poll_seconds)
        self.dag_id, self.run_id, self.commit_task_id = dag_id, run_id, commit_task_id
        self._airflow_states = bool(dag_id and run_id and commit_task_id)
        self._state_call: asyncio.Future | None = None  # a question Airflow has not answered

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.EpochDeadlineTrigger",
                {"checkpoint": self.checkpoint, "epoch_id": self.epoch_id,
                 "deadline": self.deadline, "poll_seconds": self.poll_seconds,
                 "dag_id": self.dag_id, "run_id": self.run_id,
                 "commit_task_id": self.commit_task_id})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            async for event in self._watch():
                yield event
        finally:
            if self._state_call is not None:  # not waited for any more
                self._state_call.cancel()

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        settings = CheckpointSettings.from_kwargs(self.checkpoint)
        coord = await asyncio.to_thread(CheckpointHook(settings).get_coordinator)
        deadline = parse_iso(self.deadline)
        next_read, commit_seen, committing = 0.0, False, False
        while True:
            now = time.time()
            if now >= next_read:
                try:
                    decision = await read_decision(coord, self.epoch_id, self.log)
                except MalformedDocument as exc:
                    yield TriggerEvent({"epoch_id": self.epoch_id, "error": str(exc)})
                    return
                if decision is not None:
                    yield await asyncio.to_thread(self._end_event, coord, decision)
                    return
                next_read = now + self.poll_seconds
            if now >= deadline:
                event = await self._expire(coord, settings)
                if event is not None:
                    yield event
                    return
                next_read = 0.0  # not overdue by the coordinator's clock: read again
            if not commit_seen:
                # Airflow's answer only ends the watch sooner: waiting for it never delays
                # the next storage read or the deadline.
                state = await self._commit_state(min(next_read, deadline) - time.time())
                if state == UNANSWERED:
                    continue
                if state in FINISHED:
                    # Read the decision now; once only: a commit step that failed without
                    # deciding leaves the epoch to the ordinary polls and its deadline.
                    commit_seen, next_read = True, 0.0
                    continue
                committing = state in _COMMITTING
                if committing:  # the decision is being written: read it every 0.2 s
                    next_read = min(next_read, now + COMMITTING_POLL_SECONDS)
            wait = min(next_read, deadline) - time.time()
            if self._airflow_states and not commit_seen:
                wait = min(wait, COMMITTING_POLL_SECONDS if committing
                           else AIRFLOW_POLL_SECONDS)
            await asyncio.sleep(max(0.05, wait))

    async def _expire(self, coord: Coordinator,
                      settings: CheckpointSettings) -> TriggerEvent | None:
        """Abort (or complete) the overdue epoch here and end the watchdog as its decision
        says, so the abort and its alert come at the deadline, not after a worker slot
        frees for the watchdog to resume (tens of seconds on a busy deployment). If that
        fails, the watchdog resumes on a worker, which expires the epoch itself. None when
        the coordinator's clock says the deadline has not passed yet."""
        try:
            return await asyncio.to_thread(self._expire_here, coord, settings)
        except Exception as exc:  # the triggerer must survive whatever storage says
            self.log.warning("epoch %d not expired in the triggerer (%s): resuming the "
                             "watchdog on a worker to do it", self.epoch_id, exc)
            return TriggerEvent({"epoch_id": self.epoch_id, "status": "overdue"})

    def _expire_here(self, coord: Coordinator,
                     settings: CheckpointSettings) -> TriggerEvent | None:
        meta = expire_epoch(settings, coord, coord.barrier(self.epoch_id))
        # The decision just written (or found) is the one to end with: not read again.
        return None if meta is None else self._end_event(coord, Decision.of_metadata(meta))

    def _end_event(self, coord: Coordinator, decision: Decision) -> TriggerEvent:
        """End the watchdog from the triggerer, as :func:`watchdog_outcome` says."""
        state, message = watchdog_outcome(coord, decision)
        if state == "success":
            self.log.info("%s", message)
            return TaskSuccessEvent(xcoms={"return_value": decision.status})
        if state == "failed":
            # Not TaskFailedEvent: Airflow retries a task a trigger failed (up_for_retry,
            # then a try that fails the same way after retry_delay), which held the run
            # open ~6 s longer. Resumed on a worker, execute_complete fails it for good.
            self.log.error("%s", message)
            return TriggerEvent({"epoch_id": self.epoch_id, "status": decision.status,
                                 "fail": message})
        self.log.warning("%s", message)
        return TaskSkippedEvent()

    async def _commit_state(self, wait: float) -> str | None:
        """Airflow's state of the run's commit step, waiting at most ``wait`` seconds for it.
        None without a channel to Airflow's API (the trigger then watches storage only);
        ``UNANSWERED`` while Airflow has not answered: the question stays asked, not asked
        again, and its answer is read in a later turn. A triggerer whose channel to Airflow
        stalled (150 s was seen on a busy host) still aborts the epoch at its deadline."""
        if not (self._airflow_states and self.dag_id and self.run_id and self.commit_task_id):
            return None
        if self._state_call is None:
            self._state_call = asyncio.ensure_future(
                run_task_states(self.dag_id, self.run_id, [self.commit_task_id]))
        done, _ = await asyncio.wait({self._state_call}, timeout=max(0.05, wait))
        if not done:
            return UNANSWERED
        call, self._state_call = self._state_call, None
        try:
            states = call.result()
        except NoStateChannel as exc:
            self.log.info("cannot read Airflow's task states here (%s): watching storage only",
                          exc)
            self._airflow_states = False
            return None
        return states.get(self.commit_task_id)
