"""OpenLineage for checkpointed DAGs, through the OpenLineage provider's operator methods
(``get_openlineage_facets_on_complete``): the provider sends the events when it is
configured (a transport in ``[openlineage]``), and nothing at all otherwise.

- a job task's event: its inputs (the data root's prefixes it consumed new files from; each
  table input, with the version it read up to as a dataset version facet; each output of
  the upstream tasks it reads), its outputs as staged for the epoch (``<task>.<output>``),
  and the ``dagCheckpoints_epoch`` run facet (pipeline, epoch, attempt, lineage, status,
  the epoch it restored); a failed or declined attempt's event carries the facet too, and
  each try sends a RUNNING event with it once its epoch is known (a killed try's only
  link to its epoch);
- the commit step's event: the staged outputs it published as inputs, every table output
  the epoch published, with the table version its completion committed (the one writer of
  that version), and the facet with the decision (``completed`` or ``aborted``).

So the graph connects within a DAG (landing -> each task -> the next -> the commit step ->
each table) and across DAGs (a table -> the tasks reading it). Datasets are named as
OpenLineage names storage (``s3://bucket`` + path, ``file`` + path), a Delta table named in
Spark's catalog carrying that name in a ``symlinks`` facet; what is not a table is
named by the pipeline (``dag-checkpoints://<pipeline>`` + ``<task>.<output>``): checkpoint
storage's own paths and any credential never appear.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import attr
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet, dataset_version_dataset, symlinks_dataset

from checkpointing.errors import EpochNotFound
from checkpointing.protocol.state_handle import StateHandle
from checkpointing.protocol.table_formats import traits

if TYPE_CHECKING:
    from airflow.sdk import Context

    from checkpointing import Coordinator

log = logging.getLogger(__name__)
#: the run facet's key: OpenLineage's ``{prefix}_{name}`` for a custom facet
FACET_KEY = "dagCheckpoints_epoch"
#: where the facet's JSON schema is published (shipped with the package:
#: dag_checkpoints/shared/facets/CheckpointRunFacet.json)
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
    reason: str | None = None

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


def _catalog_name(name: str | None, fmt: str) -> dict[str, Any]:
    """The symlinks facet of a Delta table named in Spark's catalog: the same dataset as
    SQL users name it (``gold.carrier_stats``), as OpenLineage's Spark integration links a
    catalog table to its location. The namespace is the metastore's (``hive://host:port``
    of its PostgreSQL; ``hive`` for an embedded one): no credential, no storage path."""
    if not name or traits(fmt).catalog_named:
        return {}
    u = urlparse((os.environ.get("CKPT_METASTORE_URL") or "").removeprefix("jdbc:"))
    ns = f"hive://{u.hostname}:{u.port or 5432}" if u.scheme == "postgresql" else "hive"
    return {"symlinks": symlinks_dataset.SymlinksDatasetFacet(
        identifiers=[symlinks_dataset.Identifier(ns, name, "TABLE")])}


def _staged(pipeline: str, task_id: str, name: str) -> tuple[str, str]:
    """(namespace, name) of a task's output as staged for its epoch."""
    return f"dag-checkpoints://{pipeline}", f"{task_id}.{name}"


def _table(out: Any, version: int | None) -> OutputDataset | None:
    table = (out.meta or {}).get("table") if out is not None else None
    if table and table.get("location"):
        ns, path = dataset_name(table["location"])
        return OutputDataset(ns, path, facets={
            **_version(version), **_catalog_name(table.get("name"),
                                                 table.get("format", "delta"))})
    return None


def failed_lineage(coord: Coordinator, epoch_id: int, attempt: int) -> Any:
    """The OperatorLineage of an attempt that did not acknowledge: no dataset, the facet
    naming the epoch and the attempt; ``aborted`` with the reason when the epoch was
    (declined, timed out), else ``failed``."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    barrier, meta = coord.barrier(epoch_id), coord.metadata(epoch_id)
    aborted = meta is not None and meta.status == "aborted"
    facet = CheckpointRunFacet(coord.pipeline_id, epoch_id, barrier.lineage,
                               "aborted" if aborted else "failed", attempt,
                               reason=meta.reason if meta is not None and aborted else None)
    return OperatorLineage(run_facets={FACET_KEY: facet})


def task_lineage(coord: Coordinator, data_root: str, epoch_id: int, task_id: str) -> Any:
    """The OperatorLineage of task ``task_id``'s acknowledgement of ``epoch_id``."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    barrier = coord.barrier(epoch_id)
    handle: StateHandle | None = coord.acknowledged_handle(epoch_id, task_id)
    if handle is None:
        return OperatorLineage()
    pipeline = coord.pipeline_id
    inputs = []
    plan = barrier.plan.get(task_id)
    for up in plan.upstream if plan is not None else ():
        upstream = coord.acknowledged_handle(epoch_id, up)
        for name in sorted(upstream.outputs if upstream is not None else ()):
            inputs.append(InputDataset(*_staged(pipeline, up, name)))
    for prefix in handle.metrics.get("input_prefixes", []):
        ns, path = dataset_name(_join(data_root, prefix))
        inputs.append(InputDataset(ns, path))
    specs = barrier.plan[task_id].table_inputs if task_id in barrier.plan else {}
    for name, read in (handle.metrics.get("table_inputs") or {}).items():
        spec = specs.get(name)
        if spec is None or spec.location is None:
            continue
        ns, path = dataset_name(spec.location)
        inputs.append(InputDataset(ns, path, facets={
            **_version(read.get("to_version")), **_catalog_name(spec.name, spec.format)}))
    outputs = [OutputDataset(*_staged(pipeline, task_id, name))
               for name in sorted(handle.outputs)]
    facet = CheckpointRunFacet(pipeline, epoch_id, barrier.lineage, "acknowledged",
                               handle.attempt, handle.restored_from.get("epoch_id")
                               if handle.restored_from else None)
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={FACET_KEY: facet})


def commit_lineage(coord: Coordinator, epoch_id: int) -> Any:
    """The OperatorLineage of the commit step: what the epoch's completion published."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    try:
        barrier = coord.barrier(epoch_id)
    except EpochNotFound:
        # Retention deleted the epoch's files (an aborted epoch goes at once): its failure
        # record or kept summary still says how it ended, and published nothing.
        return _kept_record_lineage(coord, epoch_id)
    meta = coord.metadata(epoch_id)
    status = meta.status if meta is not None else "pending"
    inputs, outputs = [], []
    manifest = coord.catalog.manifest()
    if meta is not None and meta.completed and manifest is not None:
        producers = {name: task for task, h in coord.completed_handles(epoch_id).items()
                     for name in h.outputs}
        for name, out in sorted(manifest.outputs.items()):
            if out.epoch_id != epoch_id:
                continue
            version = (out.meta or {}).get("table_version")
            table = _table(out, None if version is None else int(version))
            if table is None:
                continue
            outputs.append(table)
            if name in producers:
                inputs.append(InputDataset(*_staged(coord.pipeline_id, producers[name], name)))
    facet = CheckpointRunFacet(coord.pipeline_id, epoch_id, barrier.lineage, status, None,
                               barrier.parent_epoch_id,
                               meta.reason if meta is not None and not meta.completed else None)
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={FACET_KEY: facet})


def _kept_record_lineage(coord: Coordinator, epoch_id: int) -> Any:
    """The commit step's lineage of an epoch retention deleted: the facet from what
    history keeps of it (status, lineage, parent, abort reason), no dataset."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    from checkpointing.views.stats import epoch_or_history_stats

    kept = epoch_or_history_stats(coord, epoch_id, per_task=False)
    facet = CheckpointRunFacet(coord.pipeline_id, epoch_id, kept.lineage, kept.status, None,
                               kept.parent_epoch_id,
                               kept.reason if kept.status != "completed" else None)
    return OperatorLineage(run_facets={FACET_KEY: facet})


def announce_attempt(context: Context, coord: Coordinator, epoch_id: int, attempt: int) -> None:
    """A RUNNING event of this try naming its epoch and attempt, sent once both are known.

    A try that is killed (SIGKILL, the out-of-memory killer, a lost worker) never reaches
    the operator's failure call: its START event was sent before its epoch was known, and
    the FAIL event the scheduler sends for it runs no code of ours. This event shares the
    try's OpenLineage run id, so a lineage tool ties the crashed try to its epoch and
    attempt. Sent only when OpenLineage is configured; never fails the task."""
    try:
        from airflow.providers.openlineage import conf as ol_conf

        if ol_conf.is_disabled():
            return
        from datetime import UTC, datetime

        from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter
        from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
        from openlineage.client.event_v2 import Job, Run, RunEvent, RunState

        ti, run = context["ti"], context["dag_run"]
        run_id = OpenLineageAdapter.build_task_instance_run_id(
            dag_id=run.dag_id, task_id=ti.task_id, try_number=ti.try_number,
            logical_date=run.logical_date or run.run_after,
            map_index=-1 if ti.map_index is None else ti.map_index)
        facet = CheckpointRunFacet(coord.pipeline_id, epoch_id,
                                   coord.barrier(epoch_id).lineage, "running", attempt)
        get_openlineage_listener().adapter.emit(RunEvent(
            eventType=RunState.RUNNING, eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=run_id, facets={FACET_KEY: facet}),
            job=Job(namespace=ol_conf.namespace(), name=f"{run.dag_id}.{ti.task_id}")))
    except Exception as exc:  # noqa: BLE001 - lineage must not fail the task
        log.warning("lineage: the try's epoch was not announced (%s)", type(exc).__name__)
