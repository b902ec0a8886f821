"""Missing input is news, not a silent success: what a task expects to find before it runs.

- Its data day's files (``expects=`` on the operator or the decorator, keys under the DAG's
  data root with a ``{data_day}`` placeholder, as ``CheckpointSettings.daily_inputs``): when
  an expected key is absent at the task's start, the task waits for it deferred (no worker
  slot held; :class:`~dag_checkpoints.triggers.ExpectedInputTrigger`) for up to
  ``input_grace``, then declines its epoch with one line naming the missing keys.
- A new version of a table input (``TableInput(expect_new_version=True)``, PROTOCOL 6.14):
  the version is pinned when the epoch begins, so it is the run's begin (the begin step
  and the root jobs, whichever begins) that waits for it, deferred
  (:class:`~dag_checkpoints.operators.table_version_wait.AwaitsTableVersions`,
  :class:`~dag_checkpoints.triggers.TableVersionTrigger`), for up to the longest
  ``input_grace`` of the tasks expecting one; the epoch then begins either way, and a task
  whose barrier pinned no new version declines it with one line naming the table.

A declined epoch is aborted and alerted through the DAG's alert channels once, as a
timed-out one is. Input that lands within the grace is consumed by the same run."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta
from typing import TYPE_CHECKING

from checkpointing.storage import Storage

if TYPE_CHECKING:
    from airflow.sdk import Context

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


def data_day(context: Context) -> date | None:
    """The run's data day: the day before its data interval's end, whose input the run
    consumes (the run of logical date D + 1 consumes day D, as the backfill counts days;
    a scheduled daily run's interval is that day, a manual run's may be empty); None for
    a run without a data interval."""
    end = context.get("data_interval_end")
    return end.date() - timedelta(days=1) if end is not None else None

