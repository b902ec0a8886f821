"""The checkpoint coordinator (Flink's CheckpointCoordinator) and the collaborators it
delegates its rules to.
"""
