"""The checkpoint part of a DAG run's conf: ``{"checkpoint": {"lineage": ...,
"fault_inject": ...}}``, written by backfills from a checkpoint and by drills."""

from __future__ import annotations

from typing import Any


def checkpoint_conf(conf: dict[str, Any] | None) -> dict[str, Any]:
    """``conf["checkpoint"]`` of a run (empty when absent)."""
    return dict((conf or {}).get("checkpoint") or {})
