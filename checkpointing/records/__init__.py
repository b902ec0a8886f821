"""What is kept beside the epochs: savepoints, alerts, backfill lineages and the manifest
of published outputs.
"""
