"""Published outputs as Airflow Assets. Each output a checkpointed task publishes is an
Asset named ``<pipeline>.<output>``, whose URI names the pipeline, the output and (by a
digest, never by its path) the checkpoint storage it is published from:
``x-dag-checkpoints://<storage digest>/<pipeline>/<output>``. Airflow's UI, its API and
lineage events show it; none of them shows where checkpoint storage is. The commit step
declares them as outlets and emits their events only when an epoch completes and
publishes, with the epoch id, lineage and where to read the output (a table's location and
version) in the event's extra; an aborted epoch emits nothing."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset

from checkpointing import Manifest

from .settings import CheckpointSettings


def published_asset(pipeline_id: str, output: str,
                    settings: CheckpointSettings | None = None) -> Asset:
    """The Asset of ``output`` of ``pipeline_id`` (schedule a downstream DAG on it).
    Storage comes from ``settings`` or, like everywhere, ``CKPT_STORAGE``."""
    import hashlib

    storage = (settings or CheckpointSettings(pipeline_id=pipeline_id)).storage.rstrip("/")
    # Two storages may each hold a pipeline of this id: the digest keeps their assets apart.
    digest = hashlib.sha256(storage.encode()).hexdigest()[:12] if storage else "default"
    uri = f"x-dag-checkpoints://{digest}/{pipeline_id}/{output}"
    return Asset(uri=uri, name=f"{pipeline_id}.{output}", group="dag-checkpoints",
                 extra={"pipeline_id": pipeline_id, "output": output})


def published_assets(settings: CheckpointSettings, jobs: list[Any]) -> list[Asset]:
    """The Assets of every output the checkpointed ``jobs`` declare they publish."""
    names = sorted({o for t in jobs for o in getattr(t, "outputs", ())})
    return [published_asset(settings.pipeline_id, o, settings) for o in names]


def event_extra(manifest: Manifest, output: str) -> dict[str, Any]:
    """The asset event's extra: which epoch published the output, and where to read it:
    a table output's table (format, location and the version the epoch committed, to read
    with the table's own time travel). Another output's files are in checkpoint storage,
    which no event shows: it is read through the manifest (``read_published``); the extra
    gives its files' count and size."""
    out = manifest.outputs[output]
    extra = {"epoch_id": manifest.epoch_id, "lineage": manifest.lineage,
             "published_at": manifest.published_at, "output_epoch_id": out.epoch_id,
             "rows": out.rows}
    table = (out.meta or {}).get("table")
    if table is not None:
        found = {"format": table["format"], "location": table["location"],
                 "version": out.meta.get("table_version")}
        if table["format"] == "iceberg":  # read through the catalog, at this snapshot
            found.update(name=table["name"], catalog=table["catalog"])
        return {**extra, "table": found}
    return {**extra, "files": len(out.files), "bytes": sum(f.size for f in out.files)}
