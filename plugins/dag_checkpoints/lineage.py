"""OpenLineage for checkpointed DAGs, through the OpenLineage provider's operator methods
(``get_openlineage_facets_on_complete``): the provider sends the events when it is
configured (a transport in ``[openlineage]``), and nothing at all otherwise.

- a job task's event: its inputs (the data root's prefixes it consumed new files from; each
  table input, with the version it read up to as a dataset version facet), its table
  outputs (with the version committed, when its acknowledgement completed the epoch), and
  the ``checkpoint`` run facet (pipeline, epoch, attempt, lineage, the epoch it restored);
- the commit step's event: every table output the epoch published, with the table
  version its completion committed, and the ``checkpoint`` facet with the decision.

Datasets are named as OpenLineage names storage (``s3://bucket`` + path, ``file`` + path);
an output that is not a table is named by the pipeline (``dag-checkpoints://<pipeline>``
+ the output): checkpoint storage's own paths and any credential never appear.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import attr
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet, dataset_version_dataset

from checkpointing.protocol.state_handle import StateHandle

#: where the ``checkpoint`` facet's JSON schema is published (shipped with the package:
#: dag_checkpoints/facets/CheckpointRunFacet.json)
FACET_SCHEMA = ("https://dag-checkpoints.dev/spec/facets/1-0-0/CheckpointRunFacet.json"
                "#/$defs/CheckpointRunFacet")


@attr.define
class CheckpointRunFacet(RunFacet):
    """The checkpoint epoch a run of a checkpointed task worked for."""

    pipeline: str
    epoch: int
    lineage: str
    status: str
    attempt: int | None = None
    restoredFromEpoch: int | None = None  # noqa: N815 - OpenLineage's camelCase

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a storage location, as OpenLineage names datasets: the scheme
    and bucket, and the path; no credential (a URI's user info is dropped)."""
    u = urlparse(uri)
    if u.scheme in ("s3", "s3a", "gs", "abfss", "hdfs"):
        scheme = "s3" if u.scheme == "s3a" else u.scheme
        return f"{scheme}://{u.hostname or ''}", u.path.lstrip("/")
    return "file", u.path if u.scheme == "file" else uri


def _join(root: str, prefix: str) -> str:
    return root.rstrip("/") + "/" + prefix.lstrip("/")


def _version(v: int | None) -> dict[str, Any]:
    return {} if v is None else {
        "version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(v))}


def _output(pipeline: str, name: str, out: Any, version: int | None) -> OutputDataset:
    table = (out.meta or {}).get("table") if out is not None else None
    if table and table.get("location"):
        ns, path = dataset_name(table["location"])
        return OutputDataset(ns, path, facets=_version(version))
    return OutputDataset(f"dag-checkpoints://{pipeline}", name)


def task_lineage(coord: Any, data_root: str, epoch_id: int, task_id: str) -> Any:
    """The OperatorLineage of task ``task_id``'s acknowledgement of ``epoch_id``."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    barrier = coord.barrier(epoch_id)
    handle: StateHandle | None = coord.acknowledged_handle(epoch_id, task_id)
    if handle is None:
        return OperatorLineage()
    inputs = []
    for prefix in handle.metrics.get("input_prefixes", []):
        ns, path = dataset_name(_join(data_root, prefix))
        inputs.append(InputDataset(ns, path))
    specs = barrier.plan[task_id].table_inputs if task_id in barrier.plan else {}
    for name, read in (handle.metrics.get("table_inputs") or {}).items():
        spec = specs.get(name)
        if spec is None or spec.location is None:
            continue
        ns, path = dataset_name(spec.location)
        inputs.append(InputDataset(ns, path, facets=_version(read.get("to_version"))))
    committed = coord.catalog.published_tables(epoch_id)
    outputs = [_output(coord.pipeline_id, name, out, committed.get(name))
               for name, out in sorted(handle.outputs.items())]
    facet = CheckpointRunFacet(coord.pipeline_id, epoch_id, barrier.lineage, "acknowledged",
                               handle.attempt, handle.restored_from.get("epoch_id")
                               if handle.restored_from else None)
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={"checkpoint": facet})


def commit_lineage(coord: Any, epoch_id: int) -> Any:
    """The OperatorLineage of the commit step: what the epoch's completion published."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    meta = coord.metadata(epoch_id)
    barrier = coord.barrier(epoch_id)
    status = meta.status if meta is not None else "pending"
    outputs = []
    manifest = coord.catalog.manifest()
    if meta is not None and meta.completed and manifest is not None:
        for name, out in sorted(manifest.outputs.items()):
            if out.epoch_id == epoch_id:
                version = (out.meta or {}).get("table_version")
                outputs.append(_output(coord.pipeline_id, name, out,
                                       None if version is None else int(version)))
    facet = CheckpointRunFacet(coord.pipeline_id, epoch_id, barrier.lineage, status, None,
                               barrier.parent_epoch_id)
    return OperatorLineage(outputs=outputs, run_facets={"checkpoint": facet})
