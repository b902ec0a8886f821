"""The epoch watchdog (the deadline trigger) and the Deadline Alert's callback."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_watchdog_reads_the_decision_while_the_commit_step_runs(tmp_path):
    """The run ends only when its watchdog does: while Airflow shows the commit step
    running, the trigger reads storage every 0.2 s instead of its ordinary poll (30 s
    here), so it ends with the epoch's decision, not one poll later."""
    import asyncio
    import threading

    from dag_checkpoints import CheckpointSettings
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    from checkpointing import Coordinator
    from checkpointing.storage import LocalStorage
    from tests.support.helpers import DIAMOND, ack_task

    settings = CheckpointSettings("p", storage=f"file://{tmp_path}/ckpt")
    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    b = c.begin_epoch(DIAMOND, "r")
    for task, tp in DIAMOND.items():
        ack_task(c, b.epoch_id, task, files={"state": task.encode()},
                 outputs={"gold": b"g"} if tp.publishes else None, tmp=tmp_path)
    trigger = EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id, b.deadline, 30.0,
                                   "d", "r", "checkpoint_commit")
    asked: list[str] = []

    async def running(wait: float) -> str:  # noqa: ARG001
        asked.append("running")
        return "running"

    trigger._commit_state = running  # Airflow's answer: the commit step is running

    async def first_event():
        gen = trigger.run()
        return await asyncio.wait_for(gen.__anext__(), timeout=10)

    # The commit step decides 0.5 s into the watch (after the trigger's first read).
    threading.Timer(0.5, lambda: c.complete(b.epoch_id)).start()
    from airflow.triggers.base import TaskSuccessEvent

    event = asyncio.run(first_event())
    assert isinstance(event, TaskSuccessEvent)
    assert len(asked) >= 2  # it kept asking Airflow at the committing pace


def _open_epoch(root: Path, **config: float) -> tuple:
    """(settings, coordinator, barrier): pipeline ``p`` checkpointed under ``root`` with
    ``CheckpointConfig(**config)``, and an open epoch of the diamond DAG for run ``r``."""
    from dag_checkpoints import CheckpointSettings

    from checkpointing import CheckpointConfig, Coordinator
    from checkpointing.storage import LocalStorage
    from tests.support.helpers import DIAMOND

    settings = CheckpointSettings("p", storage=f"file://{root}",
                                  config=CheckpointConfig(**config))
    c = Coordinator(LocalStorage(root), "p", config=settings.config)
    return settings, c, c.begin_epoch(DIAMOND, "r")


def test_watchdog_of_an_epoch_that_spent_the_budget_fails_without_a_retry(tmp_path):
    """An aborted epoch with the failure budget spent: the watchdog's trigger resumes it on a
    worker, where it fails for good (a TaskFailedEvent from the trigger is retried by
    Airflow, which held the run open a retry_delay longer); within the budget it is skipped
    from the triggerer."""
    import asyncio

    from airflow.sdk.exceptions import AirflowFailException
    from airflow.triggers.base import TaskSkippedEvent, TriggerEvent
    from dag_checkpoints.operators import EpochTimeoutOperator
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    def first_event(tolerable: int, root: Path):
        settings, c, b = _open_epoch(root, tolerable_failed_epochs=tolerable)
        c.abort(b.epoch_id, "declined", "bad input", declined_by="a")
        trigger = EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id, b.deadline, 30.0)
        return settings, asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 10))

    settings, event = first_event(0, tmp_path / "spent")
    assert type(event) is TriggerEvent and "budget exhausted" in event.payload["fail"]
    op = EpochTimeoutOperator(task_id="checkpoint_timeout", settings=settings,
                              begin_task_id="checkpoint_begin")
    with pytest.raises(AirflowFailException, match="budget exhausted"):
        op.execute_complete({}, event.payload)
    _, event = first_event(1, tmp_path / "within")
    assert isinstance(event, TaskSkippedEvent)


def test_watchdog_aborts_an_overdue_epoch_from_the_triggerer(tmp_path):
    """Past its deadline the trigger aborts the epoch (reason timeout, the unacknowledged
    tasks named) and records its alert itself, then ends the watchdog as the decision says,
    without resuming on a worker: a worker slot may be minutes away on a busy deployment."""
    import asyncio

    from airflow.triggers.base import TaskSkippedEvent, TriggerEvent
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    from checkpointing.records.alerts import read_alert
    from tests.support.helpers import DIAMOND, ack_task

    def first_event(tolerable: int, root: Path):
        settings, c, b = _open_epoch(root, timeout_seconds=1,
                                     tolerable_failed_epochs=tolerable)
        ack_task(c, b.epoch_id, "src_a", files={"state": b"a"}, tmp=root.parent)
        trigger = EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id, b.deadline, 30.0)
        event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 10))
        return c, b, event

    c, b, event = first_event(1, tmp_path / "within")
    assert isinstance(event, TaskSkippedEvent)
    meta = c.metadata(b.epoch_id)
    assert meta.status == "aborted" and meta.reason == "timeout"
    assert set(meta.missing_tasks) == set(DIAMOND) - {"src_a"}
    alert = read_alert(c.storage, c.layout, b.epoch_id)
    assert alert is not None and alert.reason == "timeout"
    _, _, event = first_event(0, tmp_path / "spent")
    assert type(event) is TriggerEvent and "budget exhausted" in event.payload["fail"]


def test_watchdog_resumed_on_a_worker_ends_an_overdue_epoch_as_the_trigger_would(tmp_path):
    """When the trigger could not expire the epoch (its storage call raised) it resumes the
    task on a worker with an "overdue" event: the worker aborts the epoch and ends the task
    as the trigger would have, skipped within the failure budget, failed beyond it."""
    import time

    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
    from dag_checkpoints.operators import EpochTimeoutOperator

    for tolerable, raised in ((1, AirflowSkipException), (0, AirflowFailException)):
        settings, c, b = _open_epoch(tmp_path / f"t{tolerable}", timeout_seconds=1,
                                     tolerable_failed_epochs=tolerable)
        op = EpochTimeoutOperator(task_id="checkpoint_timeout", settings=settings,
                                  begin_task_id="checkpoint_begin")
        event = {"epoch_id": b.epoch_id, "status": "overdue"}
        assert op.execute_complete({}, event) == "pending"  # before its deadline
        assert c.metadata(b.epoch_id) is None
        time.sleep(1.2)
        with pytest.raises(raised, match="timeout"):
            op.execute_complete({}, event)
        meta = c.metadata(b.epoch_id)
        assert meta.status == "aborted" and meta.reason == "timeout"


def test_deadline_alert_expires_the_epoch_at_its_own_deadline(tmp_path, monkeypatch):
    """The DAG's Deadline Alert fires timeout_seconds after the run was queued, before the
    epoch's own deadline (its barrier was written later): its callback waits for that
    deadline, then aborts the epoch and alerts once; an epoch decided meanwhile is left as
    it was, and nothing is alerted. Its kwargs hold the pipeline id only: it finds the
    settings the begin step registered as an Airflow Variable (here from the environment,
    a secrets backend Airflow reads Variables from)."""
    import asyncio
    import json
    import threading
    import time

    from dag_checkpoints.shared.registered_settings import registered, variable_key
    from dag_checkpoints.shared.timeouts import deadline_alert, deadline_missed

    from checkpointing.protocol.documents import parse_iso
    from checkpointing.records.alerts import read_alert
    from tests.support.helpers import DIAMOND, ack_task

    for complete in (False, True):
        root = tmp_path / f"c{complete}"
        settings, c, b = _open_epoch(root, timeout_seconds=2, tolerable_failed_epochs=1)
        monkeypatch.setenv("AIRFLOW_VAR_" + variable_key("d").upper(),
                           json.dumps(settings.to_kwargs()))
        assert registered("d") == settings
        kwargs = deadline_alert(settings).callback.kwargs
        assert kwargs == {"pipeline_id": "p"}
        if complete:  # its tasks acknowledge and its commit step completes it meanwhile
            def finish(c=c, b=b, root=root):
                for t in DIAMOND:
                    ack_task(c, b.epoch_id, t, files={"state": t.encode()}, tmp=root.parent)
                c.complete(b.epoch_id)
            threading.Timer(0.5, finish).start()
        asyncio.run(asyncio.wait_for(deadline_missed(
            {"dag_run": {"dag_run_id": "r", "dag_id": "d"}}, **kwargs), 20))
        assert time.time() >= parse_iso(b.deadline)  # not before the epoch's own deadline
        meta = c.metadata(b.epoch_id)
        alert = read_alert(c.storage, c.layout, b.epoch_id)
        if complete:
            assert meta.status == "completed" and alert is None
        else:
            assert meta.status == "aborted" and meta.reason == "timeout"
            assert alert is not None and alert.reason == "timeout"
    # A run whose epoch is decided, or which never opened one, or of a DAG whose begin step
    # never ran (nothing registered), returns at once; so does a DAG serialized by an
    # earlier version, whose kwargs are the settings themselves.
    t0 = time.monotonic()
    asyncio.run(deadline_missed({"dag_run": {"dag_run_id": "r", "dag_id": "d"}}, **kwargs))
    asyncio.run(deadline_missed({"dag_run": {"dag_run_id": "other", "dag_id": "d"}},
                                **kwargs))
    asyncio.run(deadline_missed({"dag_run": {"dag_run_id": "r", "dag_id": "unregistered"}},
                                pipeline_id="p"))
    asyncio.run(deadline_missed({"dag_run": {"dag_run_id": "r"}},
                                checkpoint=settings.to_kwargs()))
    assert time.monotonic() - t0 < 5


def test_watchdog_enforces_the_deadline_while_airflow_does_not_answer(tmp_path, monkeypatch):
    """The trigger's question to Airflow (the commit step's state) never answered, as when
    a busy triggerer's channel to Airflow stalled for minutes: the epoch is still aborted
    at its deadline, from storage, and the question is asked once, not again every turn."""
    import asyncio
    import time

    from airflow.triggers.base import TaskSkippedEvent
    from dag_checkpoints.triggers import epoch_deadline

    from checkpointing.protocol.documents import parse_iso

    asked: list[str] = []

    async def never_answers(dag_id, run_id, task_ids):  # noqa: ANN001, ARG001
        asked.append(run_id)
        await asyncio.Event().wait()

    monkeypatch.setattr(epoch_deadline, "run_task_states", never_answers)
    settings, c, b = _open_epoch(tmp_path / "ckpt", timeout_seconds=2,
                                 tolerable_failed_epochs=1)
    trigger = epoch_deadline.EpochDeadlineTrigger(settings.to_kwargs(), b.epoch_id,
                                                  b.deadline, 30.0, "d", "r",
                                                  "checkpoint_commit")

    async def first_event():
        gen = trigger.run()
        try:
            return await asyncio.wait_for(gen.__anext__(), timeout=20)
        finally:
            await gen.aclose()

    event = asyncio.run(first_event())
    assert isinstance(event, TaskSkippedEvent)
    meta = c.metadata(b.epoch_id)
    assert meta.status == "aborted" and meta.reason == "timeout"
    assert parse_iso(meta.decided_at) - parse_iso(b.deadline) < 5
    assert asked == ["r"]
    assert time.time() >= parse_iso(b.deadline)
