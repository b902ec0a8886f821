"""The trigger behind each run's commit step: it waits, beside the jobs, until the last jobs
run, so that the commit step is no level of its own after the last job.

The last leaf job's acknowledgement usually completes the epoch (PROTOCOL 6.5): the commit
step then only emits the asset events and runs retention. It resumes on a worker while the
last jobs run and waits there for that decision: a resume through the triggerer and the
scheduler takes longer than the last job's tail, so resuming on the decision itself would
end the run later than a step after the jobs did (README, "After the commit level"). When
the jobs have all finished in Airflow and the epoch is still undecided (a job failed, or a
leaf died between its acknowledgement and its completion) the step completes or aborts the
epoch itself, as it did when it ran after them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from checkpointing.errors import MalformedDocument

from ..hooks.checkpoint import CheckpointHook
from ..shared.settings import CheckpointSettings
from .decision_read import read_decision
from .task_states import FINISHED, NoStateChannel, run_task_states

#: How often Airflow is asked for the jobs' states (one API call, no storage read): the
#: step's resume waits for it once the last job is queued, and with task processes that
#: fork with their imports done a last job can take less than a second.
AIRFLOW_POLL_SECONDS = 0.5
#: How often storage is read for the decision once every job runs or has finished: the
#: last acknowledgement is due, and the run ends only once the commit step does.
LAST_LEVEL_POLL_SECONDS = 0.3


class EpochCommitTrigger(BaseTrigger):
    """Fires when the run's epoch is decided (``{"status": "completed" | "aborted" |
    "decided"}``), when every checkpointed job has finished in Airflow with the epoch
    still undecided (``{"status": "jobs_finished"}``), or, with ``fire_on_last_level``, as
    soon as every job is queued, runs or has finished (``{"status": "last_level"}``): the
    commit step resumes on a worker then and waits there, briefly, for the last
    acknowledgement.

    Storage is read every ``poll_seconds`` while some job has yet to start, and every
    0.3 s once all of them are queued, run or have finished. ``epoch_id`` 0 is a run with
    checkpointing disabled: only the jobs' states are watched. Without a channel to
    Airflow's API (an older triggerer) only the decision ends it; the watchdog decides a
    stuck epoch at its deadline.
    """

    def __init__(self, checkpoint: dict[str, Any], epoch_id: int, dag_id: str, run_id: str,
                 job_task_ids: list[str], poll_seconds: float = 5.0,
                 fire_on_last_level: bool = True):
        super().__init__()
        self.checkpoint, self.epoch_id = checkpoint, int(epoch_id)
        self.dag_id, self.run_id = dag_id, run_id
        self.job_task_ids, self.poll_seconds = sorted(job_task_ids), float(poll_seconds)
        self.fire_on_last_level = bool(fire_on_last_level)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.EpochCommitTrigger",
                {"checkpoint": self.checkpoint, "epoch_id": self.epoch_id,
                 "dag_id": self.dag_id, "run_id": self.run_id,
                 "job_task_ids": self.job_task_ids, "poll_seconds": self.poll_seconds,
                 "fire_on_last_level": self.fire_on_last_level})

    def _event(self, status: str, **extra: Any) -> TriggerEvent:
        return TriggerEvent({"epoch_id": self.epoch_id, "status": status, **extra})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        coord = None
        if self.epoch_id:
            settings = CheckpointSettings.from_kwargs(self.checkpoint)
            coord = await asyncio.to_thread(CheckpointHook(settings).get_coordinator)
        channel, next_read = True, 0.0
        while True:
            states: dict[str, Any] | None = None
            if channel:
                try:
                    states = await run_task_states(self.dag_id, self.run_id,
                                                   self.job_task_ids)
                except NoStateChannel as exc:
                    self.log.warning("cannot read Airflow's task states here (%s): the "
                                     "commit step waits for the epoch's decision only", exc)
                    channel = False
                    if coord is None:  # nothing else to wait for
                        yield self._event("jobs_finished")
                        return
            finished = states is not None and all(
                states.get(t) in FINISHED for t in self.job_task_ids)
            now = time.time()
            if coord is not None and (finished or now >= next_read):
                try:
                    decision = await read_decision(coord, self.epoch_id, self.log)
                except MalformedDocument as exc:
                    yield self._event("error", error=str(exc))
                    return
                if decision is not None:
                    yield self._event(decision.status)
                    return
                next_read = now + (LAST_LEVEL_POLL_SECONDS if _last_level(states, self.job_task_ids)
                                   else self.poll_seconds)
            if finished:
                yield self._event("jobs_finished")
                return
            if self.fire_on_last_level and _last_level(states, self.job_task_ids):
                # The last acknowledgement is due: resume on a worker now, while the last
                # jobs run, so that the step is there when the epoch completes (a resume
                # through the triggerer and the scheduler costs more than the jobs' tail).
                yield self._event("last_level")
                return
            wait = AIRFLOW_POLL_SECONDS if channel else self.poll_seconds
            if coord is not None:
                wait = min(wait, next_read - time.time())
            await asyncio.sleep(max(0.05, wait))


#: A job the executor has (``queued``: its slot is taken, its process starts) or that runs.
STARTED = frozenset({"queued", "running"})


def _last_level(states: dict[str, Any] | None, jobs: list[str]) -> bool:
    """Every job is started (queued on the executor, or running) or has finished, and one has
    yet to finish: the last acknowledgement is due. A ``scheduled`` job still waits for a
    slot, which the resumed step must not take from it."""
    if not states:
        return False
    found = [states.get(t) for t in jobs]
    return any(x in STARTED for x in found) and all(x in STARTED or x in FINISHED
                                                    for x in found)
