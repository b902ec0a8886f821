"""``ckpt-airflow``: the Airflow side's command line. Run it where ``airflow backfill create``
runs (it needs the metadata database); it reads checkpoint storage like the plugin does
(CKPT_STORAGE, AWS_ENDPOINT_URL, CKPT_AWS_CONN_ID).

    ckpt-airflow backfill --dag-id flights_daily --from-epoch 12 \
        --first-day 2013-02-01 --last-day 2013-02-10 [--dry-run] [--rewind]
    ckpt-airflow backfill --dag-id flights_daily --from-savepoint before-fix --first-day ...

Days are data days: the first and the last day of input the backfill replays (the run of
logical date D + 1 consumes day D). ``--dry-run`` prints the preview and starts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys

from checkpointing.errors import CheckpointError

from .backfill import (
    BackfillRequestError,
    airflow_preview,
    start_backfill,
)
from .settings import CheckpointSettings


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ckpt-airflow", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    bf = sub.add_parser("backfill", help="backfill a date range from an epoch or a savepoint")
    bf.add_argument("--dag-id", required=True)
    origin = bf.add_mutually_exclusive_group(required=True)
    origin.add_argument("--from-epoch", type=int)
    origin.add_argument("--from-savepoint")
    bf.add_argument("--first-day", required=True,
                    help="first data day (day of input) to replay, YYYY-MM-DD")
    bf.add_argument("--last-day", required=True, help="last data day to replay, YYYY-MM-DD")
    bf.add_argument("--dry-run", action="store_true",
                    help="print what the backfill would do, start nothing")
    bf.add_argument("--rewind", action="store_true", help="allow publishing older data "
                    "than is published now (a last day behind the published frontier)")
    bf.add_argument("--storage", help="checkpoint storage URI (default: $CKPT_STORAGE)")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        settings = CheckpointSettings(pipeline_id=a.dag_id)
        if a.storage:
            settings = CheckpointSettings(pipeline_id=a.dag_id, storage=a.storage)
        coord = settings.coordinator()
        origin = {"from_epoch": a.from_epoch, "from_savepoint": a.from_savepoint}
        if a.dry_run:
            result = airflow_preview(coord, a.dag_id, a.first_day, a.last_day,
                                     rewind=a.rewind, **origin)
        else:
            result = start_backfill(coord, a.dag_id, a.first_day, a.last_day,
                                    requested_by="ckpt-airflow", rewind=a.rewind, **origin)
    except (BackfillRequestError, CheckpointError, ValueError) as exc:
        print(f"ckpt-airflow: error: {exc}", file=sys.stderr)
        return 2
    # One line, last: Airflow may log to stdout before it.
    print(json.dumps(result.to_json()))
    return 1 if a.dry_run and result.conflicts else 0


if __name__ == "__main__":
    sys.exit(main())
