"""route_report: a downstream DAG scheduled on a checkpointed pipeline's published output.

It runs when flights_daily publishes ``gold_route_stats`` (the asset event is emitted only
when an epoch completes and commits its table version, never for an aborted one) and reads
the Delta table with delta-rs (``deltalake``), at the version named in the event: the
table's own time travel, so it never sees a half-written table nor a later epoch's.
Any engine that reads Delta (Spark, DuckDB, Trino, polars) reads it the same way.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task
from dag_checkpoints import CheckpointHook, CheckpointSettings, published_asset

ROUTES = published_asset("flights_daily", "gold_route_stats")


@dag(dag_id="route_report", schedule=[ROUTES], start_date=datetime(2013, 1, 1),
     catchup=False, tags=["example", "downstream"])
def route_report():
    @task
    def busiest_routes(triggering_asset_events=None) -> dict:
        from deltalake import DeltaTable

        from checkpointing.tables.delta import storage_options, table_path

        event = triggering_asset_events[ROUTES][-1]
        table = event.extra["table"]  # {"format": "delta", "location", "version"}
        # The S3 endpoint (MinIO here) is the checkpoint storage's; credentials come from
        # the standard AWS environment.
        endpoint = CheckpointHook(CheckpointSettings("flights_daily")).get_storage() \
            .endpoint_url
        routes = DeltaTable(table_path(table["location"]), version=table["version"],
                            storage_options=storage_options(table["location"], endpoint)
                            ).to_pandas(columns=["origin", "dest", "flights"])
        top = routes.nlargest(5, "flights")
        return {"event_epoch_id": event.extra["epoch_id"], "read_epoch_id":
                event.extra["output_epoch_id"], "table_version": table["version"],
                "routes": len(routes), "flights": int(routes["flights"].sum()),
                "top": top.to_dict("records")}

    busiest_routes()


route_report()
