"""Drills: faults a run injects on purpose, to see a retry restore and a timeout alert
(``conf["checkpoint"]["fault_inject"]`` or ``CKPT_FAULT_INJECT``). Off in a deployment
unless Airflow's ``[dag_checkpoints] drills`` enables them: whoever may trigger a DAG with a
conf could otherwise fail or hang its tasks."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from ..shared.runconf import checkpoint_conf

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Fault injection for tests and drills: "<task_id>:<attempt>" fails that attempt after its
#: snapshot and before its acknowledgement, the worst moment for exactly-once.
FAULT_ENV = "CKPT_FAULT_INJECT"

def drills_enabled() -> bool:
    """Whether this deployment lets runs inject faults: Airflow's ``[dag_checkpoints]
    drills`` (``AIRFLOW__DAG_CHECKPOINTS__DRILLS=True`` on the workers), off by default.
    Whoever may trigger a DAG with a conf could otherwise fail or hang its tasks."""
    from airflow.configuration import conf

    return conf.getboolean("dag_checkpoints", "drills", fallback=False)


def fault_spec(context: Context) -> str:
    """The drill a run asks for: ``conf["checkpoint"]["fault_inject"]``, else the
    ``CKPT_FAULT_INJECT`` environment variable (in-process mode only); refused in one
    line unless the deployment enables drills (:func:`drills_enabled`).

    Every step of the run asks before its epoch is begun or joined (the begin step, the
    root jobs, the commit step), so a refused drill begins no epoch: nothing is aborted,
    no failure is counted against ``tolerable_failed_epochs``, and no one is paged."""
    conf = checkpoint_conf(getattr(context.get("dag_run"), "conf", None))
    spec = str(conf.get("fault_inject") or os.environ.get(FAULT_ENV, ""))
    if spec and not drills_enabled():
        raise AirflowFailException(
            f"fault injection ({spec!r}) is a drill, and drills are off in this deployment: "
            "the run is refused before its epoch begins; enable them with "
            "AIRFLOW__DAG_CHECKPOINTS__DRILLS=True on the workers")
    return spec


def with_fault(job: Any, task_id: str, attempt: int, spec: str = "") -> Any:
    """Wrap ``job`` with the fault ``spec`` names for this attempt, if any:
    ``task:attempt`` fails after the snapshot; ``task:attempt:hang`` sleeps there for
    ``CKPT_FAULT_HANG_SECONDS`` (a silently hanging task, for timeout drills)."""
    target, _, mode = spec.partition(f"{task_id}:{attempt}")
    if target or not spec or mode not in ("", ":hang"):
        return job

    def faulty(run: Any) -> Any:
        result = job(run)  # state written and snapshotted...
        if mode == ":hang":
            time.sleep(float(os.environ.get("CKPT_FAULT_HANG_SECONDS", 600)))
            return result
        raise RuntimeError(f"injected fault ({FAULT_ENV}={spec}): after the snapshot of "
                           f"attempt {attempt}, before its acknowledgement")

    return faulty
