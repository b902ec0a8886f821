"""Staged files of table outputs that no table will reference (PROTOCOL 6.12, 6.13).

A task stages a table output's files in the table's own location, one directory per
attempt (:func:`checkpointing.tables.spec.staged_dir`). Those an epoch's commit adds stay: they
are the table's files from then on. The others would stay forever, since the table's log
never names them: the files a ``merge`` commit read and rewrote into the table, those of
an attempt that failed before the accepted one, and every file of an aborted epoch. They
go here: the commit step removes its epoch's once the commit stands, retention those of
the epochs it deletes. Files a table, a kept epoch or a savepoint references are never
candidates.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote

from checkpointing.protocol.state_handle import FileRef
from checkpointing.tables.spec import TableSpec, is_staged_by, relative_path, staged_epoch_prefix


def _plain(uri: str) -> str:
    return unquote(uri.replace("s3a://", "s3://"))


def task_prefixes(spec: TableSpec, files: Iterable[FileRef], pipeline_id: str,
                  epoch_id: int) -> set[str]:
    """The staged directories' common prefix (``ckpt-<p>-e<N>-<task>-a``) of the tasks
    that staged ``files`` in epoch ``epoch_id``: the attempts whose leftovers are this
    output's, whichever attempt the epoch accepted."""
    out = set()
    for f in files:
        if is_staged_by(spec, f, pipeline_id, epoch_id):
            directory = relative_path(spec, f).split("/", 1)[0]
            out.add(directory.rstrip("0123456789"))
    return out


def remove_unreferenced(spec: TableSpec, prefixes: Iterable[str], keep: Iterable[str],
                        endpoint_url: str | None = None, dry_run: bool = False) -> int:
    """Delete the files under ``prefixes`` (staged directories' names) in the table's
    location that ``keep`` (URIs) does not name; returns how many there were."""
    from checkpointing.storage import open_storage

    kept = {_plain(u) for u in keep}
    wanted = tuple(sorted(set(prefixes)))
    if not wanted:
        return 0
    store = open_storage(spec.location, endpoint_url=endpoint_url)
    gone = 0
    # The table's top-level directories first (one listing of names, not of the table's
    # files: a local store would walk the whole table for a bare name prefix), from the
    # first prefix on and no further than the last: listings are sorted, and a commit
    # step must not page through a partitioned table's every partition.
    directories = []
    for d in store.list_dirs("", start_after=wanted[0]):
        if d.startswith(wanted):
            directories.append(d)
        elif d > wanted[-1]:
            break
    for directory in directories:
        for o in list(store.list(directory)):
            if _plain(store.uri(o.key)) in kept:
                continue
            if not dry_run:
                store.delete(o.key)
            gone += 1
    return gone


def after_commit(spec: TableSpec, files: tuple[FileRef, ...], pipeline_id: str,
                 epoch_id: int, endpoint_url: str | None = None) -> int:
    """Once an epoch's commit to ``spec`` stands: remove what its tasks staged there that
    the table does not reference (a merge's rows, which the commit rewrote into table
    files; the files of attempts the epoch did not accept)."""
    keep = () if spec.mode == "merge" else [f.uri for f in files]
    return remove_unreferenced(spec, task_prefixes(spec, files, pipeline_id, epoch_id),
                               keep, endpoint_url)


def of_deleted_epoch(specs: Iterable[TableSpec], pipeline_id: str, epoch_id: int,
                     keep: Iterable[str], endpoint_url: str | None = None,
                     dry_run: bool = False) -> int:
    """When retention deletes an epoch: remove what its attempts staged in the tables
    ``specs`` that ``keep`` (the files tables, kept epochs and savepoints reference, and
    a completed epoch's own committed files) does not name; returns how many."""
    kept = list(keep)
    by_location = {s.location: s for s in specs}
    return sum(remove_unreferenced(s, [staged_epoch_prefix(pipeline_id, epoch_id)], kept,
                                   endpoint_url, dry_run)
               for _, s in sorted(by_location.items()))
