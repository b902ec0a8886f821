"""Waiting for the new table versions a run's epoch expects before it begins (see
:mod:`dag_checkpoints.shared.expected_inputs`): a mixin of the operators that may begin the epoch,
the begin step and the root jobs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from checkpointing.errors import CheckpointError
from checkpointing.tables.expectations import awaited_table_versions

from ..hooks.checkpoint import CheckpointHook
from ..task.task_epoch import run_lineage
from ..triggers.expected_input import MAX_POLL_SECONDS, TableVersionTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

if TYPE_CHECKING:  # a mixin of operators: typed as the BaseOperator it is mixed into
    from airflow.sdk import BaseOperator as _Operator
else:
    _Operator = object


class AwaitsTableVersions(_Operator):
    """For the operators that may begin a run's epoch (the begin step, a root job): wait,
    deferred, before beginning, for the new table versions the epoch expects."""

    #: the longest ``input_grace`` of the plan's tasks expecting a new table version, set by
    #: :func:`~dag_checkpoints.checkpoint_dag` (0: begin at once)
    table_input_grace: float = 0.0
    #: set when the wait ended (landed or not): begin now, whatever the tables hold
    _table_wait_over: bool = False

    def _await_table_versions(self, context: Context, settings: Any, plan: Any) -> None:
        """Return when the run's epoch may begin now: it is open already, nothing is
        expected, what is expected is there, the wait is over or has no grace. Otherwise
        defer until the versions land or the grace ends."""
        if self._table_wait_over or self.table_input_grace <= 0:
            return
        coord = CheckpointHook(settings).get_coordinator()
        try:
            lineage = run_lineage(coord, context)[0]
            if coord.open_epoch_for_run(context["dag_run"].run_id, lineage) is not None:
                return  # joining the run's epoch: its versions are pinned already
            awaited = awaited_table_versions(coord, plan, lineage)
            unmet = [a for a in awaited
                     if not a.met_by(coord.newest_table_version(a.spec))]
        except CheckpointError:
            return  # the begin itself says what cannot be read, in one line
        if not unmet:
            return
        self.log.warning("waiting for new versions, deferred, up to %.0f s: %s",
                         self.table_input_grace,
                         "; ".join(a.wanted() for a in unmet))
        self.defer(trigger=TableVersionTrigger(
            settings.to_kwargs(), [a.to_json() for a in unmet],
            time.time() + self.table_input_grace,
            poll_seconds=min(MAX_POLL_SECONDS, max(1.0, self.table_input_grace / 20))),
            method_name="execute_after_table_versions")

    def execute_after_table_versions(self, context: Context,
                                     event: dict[str, Any] | None = None) -> Any:
        """Resumed from :class:`TableVersionTrigger`: begin now, with what landed."""
        if event and event.get("status") == "missing":
            self.log.warning("expected table versions did not land in %.0f s: %s",
                             self.table_input_grace, "; ".join(event.get("lines") or ()))
        self._table_wait_over = True
        return self.execute(context)
