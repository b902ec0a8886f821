"""Airflow's DAG-run listener: a run that ended while its epoch was pending has the epoch
cancelled at once.

An operator who marks a run failed (or successful) in Airflow's UI or REST API, or the
scheduler failing it at its ``dagrun_timeout``, stops the run's tasks and skips its
commit step and watchdog: nothing would decide the epoch before its timeout, and the
pending epoch would hold its lineage's slot (``max_concurrent_epochs``), so that the next
run could not begin until then. Flink cancels a job's pending checkpoints when the job is
cancelled; here :meth:`checkpointing.Coordinator.abort_run` aborts the run's pending
epochs as ``cancelled`` (an operator's decision: the failure budget is not spent).

Airflow calls these hooks in the process that changed the run's state (the api-server for
an operator's change, the scheduler otherwise), inside its request or loop: the abort runs
in a thread of its own, so that a slow or unreachable checkpoint storage never holds
them. Correctness does not depend on it: an epoch it misses still ends at its timeout.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from airflow.listeners import hookimpl

from checkpointing.protocol.epoch_metadata import EpochMetadata

from ..hooks.checkpoint import CheckpointHook
from ..shared.runconf import BEGIN_TASK_ID
from ..shared.settings import CheckpointSettings
from .deployed import carried_settings

log = logging.getLogger(__name__)


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    _cancel_in_background(dag_run, "failed", msg)


@hookimpl
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    _cancel_in_background(dag_run, "successful", msg)


def _cancel_in_background(dag_run: Any, state: str, msg: str) -> threading.Thread | None:
    try:
        dag = getattr(dag_run, "dag", None)
        begin = dag.task_dict.get(BEGIN_TASK_ID) if dag is not None else None
        settings = carried_settings(begin) if begin is not None else None
        run_id = str(dag_run.run_id)
    except Exception as exc:  # noqa: BLE001 - a listener must never fail Airflow's caller
        log.warning("checkpoint: cannot read the ended run's DAG (%s)", type(exc).__name__)
        return None
    if settings is None:  # not a checkpointed DAG
        return None
    detail = f"its DAG run ended {state} before the epoch was decided ({msg.strip()})"
    thread = threading.Thread(target=cancel_run_epochs, args=(settings, run_id, detail),
                              name="ckpt-cancel-run-epochs", daemon=True)
    thread.start()
    return thread


def cancel_run_epochs(settings: CheckpointSettings, run_id: str,
                      detail: str) -> list[EpochMetadata]:
    """Abort the pending epochs of ``run_id`` as cancelled; the decisions made here. A
    storage that cannot be reached is logged in one line (the epochs then end at their
    timeout), never raised."""
    try:
        decided = CheckpointHook(settings).get_coordinator().abort_run(run_id, detail)
    except Exception as exc:  # noqa: BLE001 - a thread's failure has no caller to tell
        log.warning("checkpoint: the pending epochs of run %s were not cancelled (%s); "
                    "they end at their timeout", run_id, type(exc).__name__)
        return []
    for meta in decided:
        log.info("checkpoint: epoch %d of %s cancelled: %s", meta.epoch_id,
                 settings.pipeline_id, detail)
    return decided
