"""``ckpt-airflow``: the command line of the plugin's backfill API. It runs anywhere the
api-server is reachable, as ``airflowctl`` does: the api-server does the work (it reads
checkpoint storage and asks Airflow's own REST API, with your token, to create the
backfill), so the command needs neither the metadata database nor storage credentials.

    ckpt-airflow backfill --dag-id flights_daily --from-epoch 12 \
        --first-day 2013-02-01 --last-day 2013-02-10 [--dry-run] [--rewind]
    ckpt-airflow backfill --dag-id flights_daily --from-savepoint before-fix --first-day ...

Days are data days: the first and the last day of input the backfill replays (the run of
logical date D + 1 consumes day D). ``--dry-run`` prints the preview and starts nothing.

The api-server: ``--api-url``, else ``$AIRFLOW_API_URL``, else Airflow's ``[api] base_url``.
Credentials: a token in ``$AIRFLOW_API_TOKEN``, or ``--username`` with the password in
``$AIRFLOW_API_PASSWORD`` (exchanged for a token at ``/auth/token``; never a flag, so that
it stays out of shell history and process listings).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .airflow_api import AirflowApi, AirflowApiError


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
    bf.add_argument("--api-url", help="the api-server (default: $AIRFLOW_API_URL, else "
                    "Airflow's [api] base_url)")
    bf.add_argument("--username", help="sign in as this user (password from "
                    "$AIRFLOW_API_PASSWORD) instead of $AIRFLOW_API_TOKEN")
    return ap


def _api_url(flag: str | None) -> str:
    url = flag or os.environ.get("AIRFLOW_API_URL")
    if not url:
        from airflow.configuration import conf

        url = conf.get("api", "base_url", fallback=None)
    if not url:
        raise ValueError("no api-server: pass --api-url or set AIRFLOW_API_URL")
    return url.rstrip("/")


def _token(url: str, username: str | None) -> str:
    if username:
        password = os.environ.get("AIRFLOW_API_PASSWORD")
        if password is None:
            raise ValueError("--username needs the password in $AIRFLOW_API_PASSWORD")
        body = AirflowApi(url).call("POST", "/auth/token",
                                    {"username": username, "password": password})
        return body["access_token"]
    token = os.environ.get("AIRFLOW_API_TOKEN")
    if not token:
        raise ValueError("no credentials: set AIRFLOW_API_TOKEN, or pass --username with "
                         "the password in AIRFLOW_API_PASSWORD")
    return token


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    body = {"first_day": a.first_day, "last_day": a.last_day, "dry_run": a.dry_run,
            "rewind": a.rewind}
    body.update({"from_epoch": a.from_epoch} if a.from_epoch is not None
                else {"from_savepoint": a.from_savepoint})
    try:
        url = _api_url(a.api_url)
        api = AirflowApi(url, {"Authorization": f"Bearer {_token(url, a.username)}"},
                         timeout=300)
        result = api.call("POST", f"/ckpt/api/dags/{a.dag_id}/backfills", body)
    except (AirflowApiError, ValueError) as exc:
        print(f"ckpt-airflow: error: {exc}", file=sys.stderr)
        return 2
    # indented for a person at a terminal; one line for a program reading a pipe
    print(json.dumps(result, indent=2 if sys.stdout.isatty() else None))
    return 1 if a.dry_run and result.get("conflicts") else 0


if __name__ == "__main__":
    sys.exit(main())
