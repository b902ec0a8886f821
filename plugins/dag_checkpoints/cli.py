"""``ckpt-airflow``: the Airflow side's command line. Run it where ``airflow backfill create``
runs (it needs the metadata database); it reads checkpoint storage like the plugin does
(CKPT_STORAGE, AWS_ENDPOINT_URL, CKPT_AWS_CONN_ID).

    ckpt-airflow backfill --dag-id flights_daily --from-epoch 12 --start 2013-02-01 --end 2013-02-10
    ckpt-airflow backfill --dag-id flights_daily --from-savepoint before-fix --start ... --end ...
"""

from __future__ import annotations

import argparse
import json
import sys

from checkpointing.errors import CheckpointError

from .backfill import BackfillRequestError, start_backfill
from .settings import CheckpointSettings


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ckpt-airflow", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    bf = sub.add_parser("backfill", help="backfill a date range from an epoch or a savepoint")
    bf.add_argument("--dag-id", required=True)
    origin = bf.add_mutually_exclusive_group(required=True)
    origin.add_argument("--from-epoch", type=int)
    origin.add_argument("--from-savepoint")
    bf.add_argument("--start", required=True, help="first logical date, YYYY-MM-DD")
    bf.add_argument("--end", required=True, help="last logical date, YYYY-MM-DD")
    bf.add_argument("--storage", help="checkpoint storage URI (default: $CKPT_STORAGE)")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        settings = CheckpointSettings(pipeline_id=a.dag_id)
        if a.storage:
            settings = CheckpointSettings(pipeline_id=a.dag_id, storage=a.storage)
        started = start_backfill(settings.coordinator(), a.dag_id, a.start, a.end,
                                 from_epoch=a.from_epoch, from_savepoint=a.from_savepoint,
                                 requested_by="ckpt-airflow")
    except (BackfillRequestError, CheckpointError, ValueError) as exc:
        print(f"ckpt-airflow: error: {exc}", file=sys.stderr)
        return 2
    # One line, last: Airflow may log to stdout before it.
    print(json.dumps(started.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
