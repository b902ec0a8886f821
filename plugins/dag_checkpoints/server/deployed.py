"""What a checkpointed DAG declares, as Airflow serialized it: the api-server never parses
DAG files, so the begin step carries the DAG's checkpoint settings (storage, pipeline id,
policies, alerts: no secrets, connection ids only), its plan and its inputs, and every
route of the plugin acts with those, not with the api-server's environment."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from typing import Any

from ..shared.runconf import BEGIN_TASK_ID
from ..shared.settings import CheckpointSettings


@dataclass(frozen=True)
class DeployedBegin:
    """The serialized begin step of a DAG and the DAG's date bounds."""

    settings: CheckpointSettings | None
    plan_json: str | None
    inputs: dict[str, Any]
    start_date: date | None
    end_date: date | None


def deployed_begin(dag_id: str) -> DeployedBegin | None:
    """The latest serialized begin step of ``dag_id``; None when the DAG has none (not
    checkpointed, or not serialized yet)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        serdag = session.scalar(SerializedDagModel.latest_item_select_object(dag_id))
        if serdag is None:
            return None
        dag = serdag.dag
        task = dag.task_dict.get(BEGIN_TASK_ID)
        if task is None:
            return None
        settings = carried_settings(task)
        plan = getattr(task, "checkpoint_plan", None)
        inputs = json.loads(getattr(task, "checkpoint_inputs", None) or "{}")
        start, end = getattr(dag, "start_date", None), getattr(dag, "end_date", None)
    return DeployedBegin(settings, plan if isinstance(plan, str) else None, inputs,
                         start.date() if start else None, end.date() if end else None)


def carried_settings(begin_task: Any) -> CheckpointSettings | None:
    """The checkpoint settings a (serialized) begin step carries; None when it carries
    none (a DAG serialized before they were carried)."""
    raw = getattr(begin_task, "checkpoint_settings", None)
    return CheckpointSettings.from_kwargs(json.loads(raw)) if isinstance(raw, str) else None


def deployed_settings(dag_id: str) -> CheckpointSettings | None:
    """The checkpoint settings ``dag_id`` was deployed with. A DAG serialized before the
    settings were carried (protocol < 1.7) gets the api-server's environment, as before;
    None for a DAG that is not checkpointed."""
    begin = deployed_begin(dag_id)
    if begin is None:
        return None
    return begin.settings or CheckpointSettings(pipeline_id=dag_id)
