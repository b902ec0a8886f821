"""What a task writes for an epoch and restores from one: incremental snapshots, a task's
view of storage.
"""
