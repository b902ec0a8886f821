"""Phase two of table outputs: one commit per output of a completed epoch (PROTOCOL 6.12),
dispatched to the committer of the table's format. Each format's committer lives in a
module of its own and is imported only when a table of that format is committed."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from checkpointing.errors import NotFound
from checkpointing.protocol.listener import TableCommitted
from checkpointing.protocol.state_handle import OutputRef
from checkpointing.tables.format_registry import implementation
from checkpointing.tables.spec import TableCommitError, TableCommitter, TableSpec, app_id
from checkpointing.tables.staging import after_commit


def committer(spec: TableSpec, endpoint_url: str | None = None) -> TableCommitter:
    """The committer of ``spec``'s format."""
    return implementation(spec.format).committer(endpoint_url)


def commit_tables(pipeline_id: str, lineage: str, epoch_id: int,
                  outputs: Mapping[str, OutputRef], endpoint_url: str | None = None,
                  report: list[TableCommitted] | None = None) -> dict[str, OutputRef]:
    """Phase two for the table outputs among ``outputs`` (name -> OutputRef): one commit
    each, idempotent per epoch; returns the outputs with each table output's ``meta``
    holding its ``table_version``, for the manifest. ``report`` receives a
    :class:`~checkpointing.protocol.listener.TableCommitted` per table output."""
    done: dict[str, OutputRef] = {}
    for name, out in outputs.items():
        if "table" not in out.meta:
            done[name] = out
            continue
        spec = TableSpec.from_json(out.meta["table"])
        t0 = time.monotonic()
        app = app_id(pipeline_id, lineage, name)
        try:
            result = committer(spec, endpoint_url).commit(spec, app, epoch_id, out.files,
                                                          out.meta)
        except NotFound:
            # A racing publish step committed the merge and removed the rows it staged:
            # the committer finds the epoch's transaction now (or, if the rows are truly
            # gone, says so).
            try:
                result = committer(spec, endpoint_url).commit(spec, app, epoch_id,
                                                              out.files, out.meta)
            except NotFound as exc:
                raise TableCommitError(f"table {app!r}: epoch {epoch_id} is not committed "
                                       f"and a file it staged is gone ({exc})") from None
        after_commit(spec, out.files, pipeline_id, epoch_id, endpoint_url)
        if report is not None:
            report.append(TableCommitted(name, result.version, result.committed,
                                         time.monotonic() - t0))
        meta = {k: v for k, v in out.meta.items() if k not in ("schema", "records")}
        done[name] = replace(out, meta={**meta, "table_version": result.version})
    return done
