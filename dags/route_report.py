"""route_report: a downstream DAG scheduled on a checkpointed pipeline's published output.

It runs when flights_daily publishes ``gold_route_stats`` (the asset event is emitted only
when an epoch completes and publishes, never for an aborted one) and reads the published
version through the pipeline's manifest, so it never sees a half-written table.
"""

from __future__ import annotations

import io
from datetime import datetime

from airflow.sdk import dag, task
from dag_checkpoints import CheckpointSettings, published_asset

from checkpointing import read_manifest

ROUTES = published_asset("flights_daily", "gold_route_stats")


@dag(dag_id="route_report", schedule=[ROUTES], start_date=datetime(2013, 1, 1),
     catchup=False, tags=["example", "downstream"])
def route_report():
    @task
    def busiest_routes(triggering_asset_events=None) -> dict:
        import pandas as pd

        event = triggering_asset_events[ROUTES][-1]
        storage = CheckpointSettings("flights_daily").open_storage()
        manifest = read_manifest(storage, CheckpointSettings("flights_daily").coordinator()
                                 .layout)
        out = manifest.outputs["gold_route_stats"]
        table = pd.concat([pd.read_parquet(io.BytesIO(storage.read(
            storage.key_for_uri(f.uri))[0])) for f in out.files], ignore_index=True)
        top = table.nlargest(5, "flights")[["origin", "dest", "flights"]]
        return {"event_epoch_id": event.extra["epoch_id"], "read_epoch_id": out.epoch_id,
                "routes": len(table), "flights": int(table["flights"].sum()),
                "top": top.to_dict("records")}

    busiest_routes()


route_report()
