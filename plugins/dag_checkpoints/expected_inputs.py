"""Missing input is news, not a silent success: what a task expects to find before it runs.

- Its data day's files (``expects=`` on the operator or the decorator, keys under the DAG's
  data root with a ``{data_day}`` placeholder, as ``CheckpointSettings.daily_inputs``): when
  an expected key is absent at the task's start, the task waits for it deferred (no worker
  slot held; :class:`~dag_checkpoints.triggers.ExpectedInputTrigger`) for up to
  ``input_grace``, then declines its epoch with one line naming the missing keys.
- A new version of a table input (``TableInput(expect_new_version=True)``, PROTOCOL 6.14):
  the version is pinned when the epoch begins, so it is the run's begin (the begin step
  and the root jobs, whichever begins) that waits for it, deferred
  (:class:`~dag_checkpoints.triggers.TableVersionTrigger`), for up to the longest
  ``input_grace`` of the tasks expecting one; the epoch then begins either way, and a task
  whose barrier pinned no new version declines it with one line naming the table.

A declined epoch is aborted and alerted through the DAG's alert channels once, as a
timed-out one is. Input that lands within the grace is consumed by the same run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from checkpointing.errors import CheckpointError
from checkpointing.storage import Storage
from checkpointing.table_changes import pin

PLACEHOLDER = "{data_day}"


def validate_templates(templates: Sequence[str], what: str) -> tuple[str, ...]:
    """The templates as a tuple; ValueError for one without the placeholder."""
    for template in templates:
        if not isinstance(template, str) or PLACEHOLDER not in template:
            raise ValueError(f"{what} {template!r} has no {PLACEHOLDER} placeholder")
    return tuple(templates)


def grace_seconds(grace: timedelta | float | int) -> float:
    seconds = grace.total_seconds() if isinstance(grace, timedelta) else float(grace)
    if seconds < 0:
        raise ValueError(f"input_grace must be >= 0, not {grace!r}")
    return seconds


def expected_keys(templates: Sequence[str], day: date) -> list[str]:
    """The keys ``templates`` name for data day ``day``."""
    return [t.format(data_day=day.isoformat()) for t in templates]


def missing_keys(data: Storage, keys: Sequence[str]) -> list[str]:
    """The keys of ``keys`` that are not in ``data``."""
    return [k for k in keys if not data.exists(k)]


def data_day(context: Any) -> date | None:
    """The run's data day: the day before its data interval's end, whose input the run
    consumes (the run of logical date D + 1 consumes day D, as the backfill counts days;
    a scheduled daily run's interval is that day, a manual run's may be empty); None for
    a run without a data interval."""
    end = context.get("data_interval_end")
    return end.date() - timedelta(days=1) if end is not None else None


class AwaitsTableVersions:
    """For the operators that may begin a run's epoch (the begin step, a root job): wait,
    deferred, before beginning, for the new table versions the epoch expects."""

    #: the longest ``input_grace`` of the plan's tasks expecting a new table version, set by
    #: :func:`~dag_checkpoints.checkpoint_dag` (0: begin at once)
    table_input_grace: float = 0.0
    #: set when the wait ended (landed or not): begin now, whatever the tables hold
    _table_wait_over: bool = False

    def _await_table_versions(self, context: Any, settings: Any, plan: Any) -> None:
        """Return when the run's epoch may begin now: it is open already, nothing is
        expected, what is expected is there, the wait is over or has no grace. Otherwise
        defer until the versions land or the grace ends."""
        from .task_epoch import run_lineage
        from .triggers.expected_input import MAX_POLL_SECONDS, TableVersionTrigger

        if self._table_wait_over or self.table_input_grace <= 0:
            return
        coord = settings.coordinator()
        try:
            lineage = run_lineage(coord, context)[0]
            if coord.open_epoch_for_run(context["dag_run"].run_id, lineage) is not None:
                return  # joining the run's epoch: its versions are pinned already
            awaited = coord.awaited_table_versions(plan, lineage)
            unmet = [a for a in awaited
                     if not a.met_by(pin(a.spec, coord.table_pins.endpoint_url))]
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

    def execute_after_table_versions(self, context: Any,
                                     event: dict[str, Any] | None = None) -> Any:
        """Resumed from :class:`TableVersionTrigger`: begin now, with what landed."""
        if event and event.get("status") == "missing":
            self.log.warning("expected table versions did not land in %.0f s: %s",
                             self.table_input_grace, "; ".join(event.get("lines") or ()))
        self._table_wait_over = True
        return self.execute(context)
