"""The read-only catalog of a pipeline's checkpoints: what the REST API, the backfill,
the notifications and consumers read (the manifest of published outputs, savepoints,
alert records, backfill lineages and their promotions).

It is the coordinator's read side (``Coordinator.catalog``): callers outside the library
never hold the pipeline's storage or key layout, so a change of the on-storage format
(PROTOCOL) changes this module and the documents', not theirs. Writes go through the
coordinator."""

from __future__ import annotations

from dataclasses import dataclass

from checkpointing.protocol.layout import Layout
from checkpointing.records.alerts import EpochAlert, read_alert
from checkpointing.records.backfill_lineages import (
    LineageOrigin,
    Promotion,
    list_origins,
    read_origin,
    read_promotion,
)
from checkpointing.records.savepoints import Savepoint, list_savepoints, read_savepoint
from checkpointing.records.two_phase_publish import Manifest, published_tables, read_manifest
from checkpointing.storage import Storage


@dataclass(frozen=True)
class Catalog:
    """Reads a pipeline's checkpoint documents; never writes."""

    _storage: Storage
    _layout: Layout

    @property
    def pipeline_id(self) -> str:
        return self._layout.pipeline_id

    @property
    def storage_locations(self) -> tuple[str, ...]:
        """Where checkpoint storage lives, as messages may spell it (its root URI, and a
        local root's path): what an answer to a user must not show."""
        root = getattr(self._storage, "root", None)  # a LocalStorage's directory
        return (self._storage.uri(""), *((str(root),) if root is not None else ()))

    def manifest(self) -> Manifest | None:
        """The manifest of published outputs (PROTOCOL 6.5), None before any publish."""
        return read_manifest(self._storage, self._layout)

    def published_tables(self, epoch_id: int) -> dict[str, int]:
        """Table output -> the table version epoch ``epoch_id`` committed, as the manifest
        lists them (empty when the epoch published no table)."""
        return published_tables(self.manifest(), epoch_id)

    def savepoints(self) -> list[Savepoint]:
        return list_savepoints(self._storage, self._layout)

    def savepoint(self, name: str) -> Savepoint:
        """Savepoint ``name``; :class:`~checkpointing.errors.CheckpointError` when absent."""
        return read_savepoint(self._storage, self._layout, name)

    def alert(self, epoch_id: int) -> EpochAlert | None:
        """The alert record of an epoch that was aborted by a timeout, if any."""
        return read_alert(self._storage, self._layout, epoch_id)

    def origins(self) -> list[LineageOrigin]:
        """The backfill lineages' origin records."""
        return list_origins(self._storage, self._layout)

    def origin(self, lineage: str) -> LineageOrigin | None:
        return read_origin(self._storage, self._layout, lineage)

    def promotion(self, lineage: str) -> Promotion | None:
        """The record of lineage ``lineage``'s promotion to main, if it was promoted."""
        return read_promotion(self._storage, self._layout, lineage)
