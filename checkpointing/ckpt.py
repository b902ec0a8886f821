"""``ckpt``: inspect and manage a pipeline's checkpoints from the shell.

    ckpt [--storage URI] [--pipeline ID] [--endpoint-url URL] COMMAND ...

The global options can come from CKPT_STORAGE, CKPT_PIPELINE and AWS_ENDPOINT_URL.
Errors print one line to stderr and exit 2 (bad input) or 1 (verification failed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from checkpointing.coordination.coordinator import Coordinator
from checkpointing.coordination.retention import run_retention
from checkpointing.errors import CheckpointError
from checkpointing.ids import validate_epoch_id
from checkpointing.json_types import JsonObject
from checkpointing.protocol.epoch_metadata import AbortReason
from checkpointing.protocol.history import history_ids
from checkpointing.protocol.registry import MAIN
from checkpointing.records.savepoints import (
    create_savepoint,
    delete_savepoint,
    list_savepoints,
)
from checkpointing.records.two_phase_publish import published_tables, read_manifest
from checkpointing.state.verify import verify_epoch
from checkpointing.storage import open_storage
from checkpointing.tables.cleanup import DEFAULT_MIN_RETENTION_HOURS, vacuum_tables
from checkpointing.views.listing import list_epochs, listing_row
from checkpointing.views.stats import epoch_or_history_stats


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ckpt", description="DAG-level checkpoints: inspect and "
                                "manage a pipeline's epochs and savepoints.")
    p.add_argument("--storage", default=os.environ.get("CKPT_STORAGE"),
                   help="file:///path or s3://bucket/prefix (env CKPT_STORAGE)")
    p.add_argument("--pipeline", default=os.environ.get("CKPT_PIPELINE"),
                   help="pipeline id, e.g. the DAG id (env CKPT_PIPELINE)")
    p.add_argument("--endpoint-url", default=None,
                   help="S3-compatible endpoint (env AWS_ENDPOINT_URL)")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("epochs", help="list epochs")
    e.add_argument("--json", action="store_true")
    e.add_argument("--limit", type=int, default=50, help="newest N epochs (default 50)")
    s = sub.add_parser("show", help="one epoch with per-task statistics")
    s.add_argument("epoch")
    s.add_argument("--json", action="store_true")
    v = sub.add_parser("verify", help="check every file of a completed epoch (--all: of "
                       "every retained completed epoch)")
    v.add_argument("epoch", nargs="?", help="default: the latest completed")
    v.add_argument("--all", action="store_true", help="every completed epoch still retained")
    v.add_argument("--json", action="store_true")
    lt = sub.add_parser("latest", help="the latest completed epoch")
    lt.add_argument("--lineage", default=MAIN)
    lt.add_argument("--json", action="store_true")
    sp = sub.add_parser("savepoint", help="create, list or delete savepoints")
    spsub = sp.add_subparsers(dest="action", required=True)
    c = spsub.add_parser("create")
    c.add_argument("name")
    c.add_argument("--epoch", help="default: the latest completed epoch")
    spl = spsub.add_parser("list")
    spl.add_argument("--json", action="store_true")
    d = spsub.add_parser("delete")
    d.add_argument("name")
    cp = sub.add_parser("complete", help="complete a pending epoch every task acknowledged "
                        "(the commit step: its tables committed, its outputs published)")
    cp.add_argument("epoch")
    a = sub.add_parser("abort", help="abort a pending epoch (e.g. one whose runner is gone)")
    a.add_argument("epoch")
    a.add_argument("--reason", required=True, help="why, recorded in the epoch's outcome")
    r = sub.add_parser("retention", help="apply retention now")
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--retain", type=int, default=None, help="completed epochs to keep")
    tb = sub.add_parser("tables", help="table outputs: VACUUM keeping what retained epochs "
                        "and savepoints published (PROTOCOL 6.13)")
    tbsub = tb.add_subparsers(dest="action", required=True)
    vac = tbsub.add_parser("vacuum", help="Delta VACUUM / Iceberg snapshot expiry keeping "
                           "what retained epochs and savepoints published")
    vac.add_argument("--dry-run", action="store_true")
    vac.add_argument("--min-retention-hours", type=int, default=DEFAULT_MIN_RETENTION_HOURS,
                     help="files staged or removed more recently stay (default "
                     f"{DEFAULT_MIN_RETENTION_HOURS}, Delta's own default)")
    vw = sub.add_parser("views", help="incremental views: how a view's query is maintained")
    vwsub = vw.add_subparsers(dest="action", required=True)
    ex = vwsub.add_parser("explain", help="the incremental plan of a view, operator by "
                          "operator, or why it is recomputed whole")
    src = ex.add_mutually_exclusive_group(required=True)
    src.add_argument("--sql", help="the view's query (Spark SQL)")
    src.add_argument("--sql-file", help="a file holding the view's query")
    ex.add_argument("--input", action="append", default=[], metavar="NAME=COL:TYPE,...",
                    help="an input and its columns (repeatable)")
    ex.add_argument("--table", action="append", default=[], metavar="NAME=URI",
                    help="an input read from a Delta table's schema (repeatable)")
    return p


def _table(rows: list[JsonObject], cols: list[str]) -> str:
    if not rows:
        return "(none)"
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in cols)]
    for r in rows:
        lines.append("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols))
    return "\n".join(lines)


def _fmt_bytes(size: int) -> str:
    n = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.command == "views":  # reads a query and schemas: no pipeline, no storage
        return _cmd_views(args, sys.stdout)
    if not args.storage:
        raise CheckpointError("no storage given: use --storage URI or set CKPT_STORAGE")
    if not args.pipeline:
        raise CheckpointError("no pipeline given: use --pipeline ID or set CKPT_PIPELINE")
    storage = open_storage(args.storage, endpoint_url=args.endpoint_url)
    coord = Coordinator(storage, args.pipeline)

    if args.command in ("epochs", "show", "verify", "latest", "savepoint", "complete",
                        "abort") and \
            not coord.epoch_ids() and coord.registry().last_epoch_id == 0 and \
            not history_ids(storage, coord.layout):
        if not (args.command == "savepoint" and args.action == "list"):
            raise CheckpointError(f"pipeline {args.pipeline!r} has no epochs in "
                                  f"{storage.describe()}")

    return COMMANDS[args.command](args, coord, sys.stdout)


def _cmd_epochs(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    listing = list_epochs(coord, limit=args.limit)
    manifest = read_manifest(coord.storage, coord.layout)
    if args.json:  # the REST API's rows (GET .../epochs): one set of names
        json.dump([listing_row(st, manifest) for st in listing.rows], out, indent=2)
        out.write("\n")
    else:
        # "state": whether the epoch's files are still kept (a restore or a backfill can
        # start there) or retention deleted them and only its record is left (history)
        rows = [{"epoch": st.epoch_id, "status": st.status,
                 "state": {"epoch": "kept"}.get(st.source, st.source), "run": st.run_id,
                 "lineage": st.lineage, "acked": f"{st.tasks_acked}/{st.tasks_total}",
                 "duration_s": "" if st.duration_ms is None else
                 f"{st.duration_ms / 1000:.1f}", "started": st.created_at,
                 "reason": st.reason or "", "failed_task": st.declined_by or ""}
                for st in listing.rows]
        print(_table(rows, ["epoch", "status", "state", "run", "lineage", "acked",
                            "duration_s", "started", "reason", "failed_task"]), file=out)
        if listing.total > len(rows):
            print(f"({len(rows)} of {listing.total}; --limit N for more)", file=out)
    return 0


def _cmd_show(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    s = epoch_or_history_stats(coord, validate_epoch_id(args.epoch))
    tables = published_tables(read_manifest(coord.storage, coord.layout), s.epoch_id) \
        or s.tables
    if args.json:
        json.dump({**s.to_json(), "tables": tables}, out, indent=2)
        out.write("\n")
    else:
        print(f"epoch {s.epoch_id}  {s.status}  run={s.run_id}  lineage={s.lineage}  "
              f"parent={s.parent_epoch_id}", file=out)
        print(f"started {s.created_at}  decided {s.decided_at or '-'}  duration "
              f"{'-' if s.duration_ms is None else f'{s.duration_ms / 1000:.2f}s'}  state "
              f"{_fmt_bytes(s.state_bytes)}  written {_fmt_bytes(s.bytes_written)}", file=out)
        if s.source == "history":
            print("files deleted by retention; kept in the epoch history", file=out)
        if s.reason:
            print(f"aborted: {s.reason}: {s.detail}", file=out)
        if tables:
            print("tables: " + ", ".join(f"{name} v{v}" for name, v in tables.items()),
                  file=out)
        if s.table_pins:
            print("table inputs pinned: " + ", ".join(
                f"{name} v{pin.get('version')}" for name, pin in sorted(s.table_pins.items())),
                file=out)

        rows = [{"task": t.task_id, "status": t.status, "attempt": t.acked_attempt or
                 t.attempts, "ack_after_s": "" if t.ack_delay_ms is None else
                 f"{t.ack_delay_ms / 1000:.2f}", "state": _fmt_bytes(t.state_bytes),
                 "written": _fmt_bytes(t.bytes_written),
                 "async_ms": "" if t.async_ms is None else f"{t.async_ms:.0f}"}
                for t in s.tasks]
        print(_table(rows, ["task", "status", "attempt", "ack_after_s", "state", "written",
                            "async_ms"]), file=out)
        for t in s.tasks:
            for line in _task_details(t.task_id, t.metrics):
                print(line, file=out)
    return 0


def _task_details(task: str, metrics: JsonObject) -> list[str]:
    """What a task read of each table input, a view task's refresh, and its job's own
    metrics, a line each."""
    lines = []
    metrics = dict(metrics)
    for name, read in sorted((metrics.pop("table_inputs", None) or {}).items()):
        start = read.get("from_version")
        lines.append(f"{task}: read {name} ({'start' if start is None else f'v{start}'}, "
                     f"v{read.get('to_version')}]" + (" in full" if read.get("full") else "")
                     + f", {read.get('files_added', 0)} file(s) added, "
                     f"{read.get('files_removed', 0)} removed")
    view = metrics.pop("view", None)
    if isinstance(view, dict):  # a view task: its refresh planner's choice (PROTOCOL 6.15)
        lines.append(f"{task}: {view.get('refresh')} refresh of view {view.get('output')}"
                     f" ({view.get('output_mode')}): {view.get('reason')}")
    if metrics:
        lines.append(f"{task}: metrics " + json.dumps(metrics, sort_keys=True))
    return lines


def _cmd_verify(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    if args.all and args.epoch:
        raise CheckpointError("give an epoch or --all, not both")
    if args.all:
        epochs = [e for e in coord.epoch_ids()
                  if (m := coord.metadata(e)) is not None and m.completed]
    else:
        one = validate_epoch_id(args.epoch) if args.epoch else coord.latest_completed()
        epochs = [] if one is None else [one]
    if not epochs:
        raise CheckpointError("no completed epoch to verify")
    reports = [(e, verify_epoch(coord, e)) for e in epochs]
    for epoch, rep in reports:
        if args.json:
            json.dump({"epoch_id": epoch, "ok": rep.ok, "files_checked": rep.files_checked,
                       "bytes_checked": rep.bytes_checked, "problems": rep.problems}, out)
            out.write("\n")
            continue
        for p in rep.problems:
            print(f"PROBLEM {p}", file=out)
        print(f"epoch {epoch}: {'OK' if rep.ok else 'FAILED'}, {rep.files_checked} files, "
              f"{_fmt_bytes(rep.bytes_checked)} verified", file=out)
    return 0 if all(rep.ok for _, rep in reports) else 1


def _cmd_latest(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    latest = coord.latest_completed(args.lineage)
    if args.json:
        json.dump({"lineage": args.lineage, "epoch_id": latest}, out)
        out.write("\n")
    elif latest is None:
        print(f"no completed epoch in lineage {args.lineage!r}", file=out)
    else:
        print(latest, file=out)
    return 0


def _cmd_savepoint(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    if args.action == "create":
        sp = create_savepoint(coord, args.name,
                              validate_epoch_id(args.epoch) if args.epoch else None)
        print(f"savepoint {sp.name!r} created from epoch {sp.epoch_id}", file=out)
    elif args.action == "list":
        rows = [{"name": s.name, "epoch_id": s.epoch_id, "lineage": s.lineage,
                 "created_at": s.created_at, "tasks": len(s.acks)}
                for s in list_savepoints(coord.storage, coord.layout)]
        if args.json:  # the REST API's names (GET .../savepoints)
            json.dump(rows, out, indent=2)
            out.write("\n")
        else:
            print(_table(rows, ["name", "epoch_id", "lineage", "created_at", "tasks"]),
                  file=out)
    else:
        delete_savepoint(coord.storage, coord.layout, args.name)
        print(f"savepoint {args.name!r} deleted", file=out)
    return 0


def _cmd_complete(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    """Phase two by hand, as the commit step does it: EpochIncomplete names the tasks that
    have not acknowledged; an epoch decided already is reported, not decided again."""
    epoch = validate_epoch_id(args.epoch)
    meta = coord.complete(epoch)
    tables = coord.catalog.published_tables(epoch)
    print(json.dumps({"epoch_id": epoch, "status": meta.status,
                      **({"tables": tables} if tables else {})}), file=out)
    return 0 if meta.completed else 1


def _cmd_abort(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    epoch = validate_epoch_id(args.epoch)
    before = coord.status(epoch)
    if before != "pending":
        raise CheckpointError(f"epoch {epoch} is {before}; only a pending epoch can be "
                              "aborted")
    meta = coord.abort(epoch, AbortReason.CANCELLED, f"aborted by hand: {args.reason}")
    if meta.completed:  # completed by a racing commit between the check and the abort
        raise CheckpointError(f"epoch {epoch} completed before it could be aborted")
    print(f"epoch {epoch} aborted (cancelled: {args.reason}); tasks not acknowledged: "
          f"{', '.join(meta.missing_tasks) or 'none'}", file=out)
    return 0


def _cmd_retention(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    if args.retain is not None:
        from dataclasses import replace
        coord.config = replace(coord.config, retained_epochs=args.retain)
    rep = run_retention(coord, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} epochs {rep.deleted_epochs or 'none'} ({rep.deleted_objects} objects, "
          f"{rep.deleted_shared} shared files, {rep.deleted_staged} staged table files no "
          f"table references); kept {rep.kept_epochs}; failure history "
          f"pruned {rep.pruned_history or 'none'}", file=out)
    return 0


def _cmd_tables(args: argparse.Namespace, coord: Coordinator, out: TextIO) -> int:
    if args.min_retention_hours < 0:
        raise CheckpointError("--min-retention-hours must be >= 0")
    done = vacuum_tables(coord, args.min_retention_hours, dry_run=args.dry_run)
    for v in done:
        print(v.describe(), file=out)
    if not done:
        print("no table output published", file=out)
    return 0


def _cmd_views(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from checkpointing.ivm.explain import explain
    from checkpointing.ivm.planner import plan_view

    sql = args.sql if args.sql is not None else Path(args.sql_file).read_text()
    schemas: dict[str, object] = {}
    for spec in args.input:
        name, _, cols = spec.partition("=")
        pairs = [c.split(":", 1) for c in cols.split(",") if c]
        if not name or not pairs or any(len(pair) != 2 for pair in pairs):
            raise CheckpointError(f"--input {spec!r} is not NAME=COLUMN:TYPE,...")
        schemas[name] = dict(pairs)
    for spec in args.table:
        name, _, uri = spec.partition("=")
        if not name or not uri:
            raise CheckpointError(f"--table {spec!r} is not NAME=URI")
        schemas[name] = _table_columns(uri, args.endpoint_url)
    print(explain(plan_view(sql, schemas)), file=out)
    return 0


def _table_columns(uri: str, endpoint_url: str | None) -> dict[str, str]:
    """A Delta table's columns at its newest version, as SQL types."""
    from checkpointing.protocol.table_inputs import TableInput
    from checkpointing.tables.changes import changes, pin

    spec = TableInput(uri.rstrip("/"))
    version = pin(spec, endpoint_url)
    # the empty range at the newest version: its schema, no data read
    arrow = changes(spec, version, version, endpoint_url).schema
    return {f.name: _sql_type(str(f.type)) for f in arrow}


def _sql_type(arrow: str) -> str:
    if arrow.startswith("decimal"):
        return arrow.replace("decimal128", "decimal").replace("decimal256", "decimal")
    if arrow.startswith("timestamp"):
        return "timestamp"
    return {"int64": "bigint", "int32": "int", "int16": "smallint", "int8": "tinyint",
            "double": "double", "float": "float", "bool": "boolean", "date32[day]": "date",
            "string": "string", "large_string": "string", "string_view": "string"
            }.get(arrow, "string")


#: each command of ``ckpt``, a function of (arguments, coordinator, output) -> exit code
COMMANDS = {"epochs": _cmd_epochs, "show": _cmd_show, "verify": _cmd_verify,
            "latest": _cmd_latest, "savepoint": _cmd_savepoint, "complete": _cmd_complete,
            "abort": _cmd_abort,
            "retention": _cmd_retention, "tables": _cmd_tables}


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        # The reader went away (`ckpt show N | head`): not an error of ours. Python's
        # recipe: point stdout at devnull so that the interpreter's flush at exit is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except CheckpointError as exc:
        print(f"ckpt: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"ckpt: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
