"""Hooks: how the provider reaches checkpoint storage (:class:`.checkpoint.CheckpointHook`)
and Spark (:mod:`.spark`) through Airflow's connections."""

from .checkpoint import CheckpointHook

__all__ = ["CheckpointHook"]
