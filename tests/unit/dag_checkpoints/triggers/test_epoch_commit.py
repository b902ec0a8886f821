"""The commit step's trigger and its resumption."""

from __future__ import annotations

import pytest


def test_commit_trigger_fires_on_the_last_acknowledgement_or_when_jobs_end(tmp_path,
                                                                          monkeypatch):
    """The commit step waits beside the jobs: its trigger fires with the epoch's decision,
    read every 0.3 s once every job runs or has finished (its ordinary poll is 30 s here),
    or when every job has finished in Airflow with the epoch undecided (the fallback that
    completes or aborts it); a run with checkpointing disabled (epoch 0) waits for the jobs
    only."""
    import asyncio
    import threading

    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.triggers import EpochCommitTrigger, epoch_commit

    from checkpointing import Coordinator
    from checkpointing.storage import LocalStorage
    from tests.support.helpers import DIAMOND, ack_task

    settings = CheckpointSettings("p", storage=f"file://{tmp_path}/ckpt")
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    jobs = sorted(DIAMOND)
    airflow_says: dict[str, str] = {}
    asked: list[dict[str, str]] = []

    async def states(dag_id, run_id, task_ids):
        asked.append(dict(airflow_says))
        return {t: airflow_says[t] for t in task_ids if t in airflow_says}

    monkeypatch.setattr(epoch_commit, "run_task_states", states)

    def first_event(epoch_id: int, fire_on_last_level: bool = False):
        trigger = EpochCommitTrigger(settings.to_kwargs(), epoch_id, "d", "r", jobs, 30.0,
                                     fire_on_last_level)

        async def run():
            return await asyncio.wait_for(trigger.run().__anext__(), timeout=10)
        return asyncio.run(run()).payload

    # The last level runs: the step resumes on a worker now, to wait there.
    b = c.begin_epoch(DIAMOND, "r")
    airflow_says.update({t: "success" for t in jobs} | {jobs[-1]: "running"})
    assert first_event(b.epoch_id, True) == {"epoch_id": b.epoch_id, "status": "last_level"}
    airflow_says.update({jobs[-1]: "queued"})  # the executor has it: its process starts
    assert first_event(b.epoch_id, True) == {"epoch_id": b.epoch_id, "status": "last_level"}
    airflow_says.update({jobs[-1]: "scheduled"})  # not yet: it waits for a slot
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(EpochCommitTrigger(
            settings.to_kwargs(), b.epoch_id, "d", "r", jobs, 30.0).run().__anext__(), 1.5))
    airflow_says.update({jobs[-1]: "queued"})  # without fire_on_last_level: the decision
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(EpochCommitTrigger(
            settings.to_kwargs(), b.epoch_id, "d", "r", jobs, 30.0, False
        ).run().__anext__(), 1.5))
    # Handed back after a worker's wait: its acknowledgement completes the epoch 0.5 s in.
    for task, tp in DIAMOND.items():
        ack_task(c, b.epoch_id, task, files={"state": task.encode()},
                 outputs={"gold": b"g"} if tp.publishes else None, tmp=tmp_path)
    airflow_says.update({jobs[-1]: "running"})
    threading.Timer(0.5, lambda: c.complete(b.epoch_id)).start()
    assert first_event(b.epoch_id) == {"epoch_id": b.epoch_id, "status": "completed"}

    # A job failed, the others are done: the epoch is still undecided.
    b2 = c.begin_epoch(DIAMOND, "r2")
    airflow_says.update({t: "success" for t in jobs} | {jobs[0]: "failed",
                                                        jobs[-1]: "upstream_failed"})
    assert first_event(b2.epoch_id) == {"epoch_id": b2.epoch_id, "status": "jobs_finished"}
    assert c.decision(b2.epoch_id) is None  # the trigger decides nothing itself

    # Checkpointing disabled: no storage read, the jobs' end only.
    asked.clear()
    airflow_says.update({jobs[0]: "running"})
    threading.Timer(0.3, lambda: airflow_says.update({jobs[0]: "success"})).start()
    assert first_event(0) == {"epoch_id": 0, "status": "jobs_finished"}
    assert len(asked) >= 2


def test_a_resumed_commit_step_hands_a_long_wait_back_to_the_triggerer(tmp_path, monkeypatch):
    """Resumed while the last jobs run, the commit step waits on its worker only so long
    (a long last job must not hold a worker slot); then it defers again, to a trigger that
    fires on the decision or the jobs' end only, not on the last level once more."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import TaskDeferred
    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.operators import epoch as epoch_ops

    from checkpointing import Coordinator
    from checkpointing.storage import LocalStorage
    from tests.support.helpers import DIAMOND

    settings = CheckpointSettings("p", storage=f"file://{tmp_path}/ckpt")
    b = Coordinator(LocalStorage(tmp_path / "ckpt"), "p").begin_epoch(DIAMOND, "r")
    monkeypatch.setattr(epoch_ops, "WORKER_WAIT_SECONDS", 0.5)
    step = epoch_ops.CommitEpochOperator(task_id="checkpoint_commit", settings=settings,
                                         job_task_ids=sorted(DIAMOND))
    running = {t: "running" for t in DIAMOND}

    class TI:
        def get_task_states(self, dag_id, run_ids):
            return {"r": running}

    context = {"ti": TI(), "dag_run": SimpleNamespace(dag_id="d", run_id="r", conf={},
                                                      triggering_user_name="admin")}
    with pytest.raises(TaskDeferred) as deferred:
        step.execute_complete(context, {"epoch_id": b.epoch_id, "status": "last_level"})
    trigger = deferred.value.trigger
    assert trigger.epoch_id == b.epoch_id and trigger.fire_on_last_level is False
    assert deferred.value.method_name == "execute_complete"
