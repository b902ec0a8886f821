"""A DAG's settings, registered where a process without the DAG can find them by id.

The Deadline Alert's callback (:func:`dag_checkpoints.shared.timeouts.deadline_missed`) runs in
the triggerer, which neither parses DAG files nor reaches Airflow's database; yet it must
open the DAG's checkpoint storage. Its kwargs are stored with the serialized DAG, shown to
every reader of the DAG, logged by Airflow when the callback fails and sent to lineage
backends in the ``airflowDagRun`` facet: they carry the pipeline id only. The begin step,
which runs with the DAG's own settings, registers them (connection ids and locations, never
a secret: :meth:`CheckpointSettings.to_kwargs`) as the Airflow Variable
``dag_checkpoints.settings.<dag_id>``, which the triggerer reads through the Task SDK like
any Variable (and which a secrets backend may hold). A run whose begin step never ran has no
epoch for the callback to expire, so a missing Variable means there is nothing to do.
"""

from __future__ import annotations

import json
from typing import Any

from .settings import CheckpointSettings

VARIABLE_PREFIX = "dag_checkpoints.settings."


def variable_key(dag_id: str) -> str:
    return VARIABLE_PREFIX + dag_id


def register(settings: CheckpointSettings, dag_id: str) -> bool:
    """Store ``settings`` under ``dag_id`` unless the same is stored; True when written."""
    from airflow.sdk import Variable

    text = json.dumps(settings.to_kwargs(), sort_keys=True)
    key = variable_key(dag_id)
    if Variable.get(key, default=None) == text:
        return False
    Variable.set(key, text, description="DAG checkpoints: this DAG's checkpoint settings "
                                        "(locations and connection ids, no secret), for "
                                        "its Deadline Alert's callback")
    return True


def registered(dag_id: str) -> CheckpointSettings | None:
    """The settings the begin step of ``dag_id`` registered; None when it never ran."""
    from airflow.sdk import Variable

    text: Any = Variable.get(variable_key(dag_id), default=None)
    return None if text is None else CheckpointSettings.from_kwargs(json.loads(text))
