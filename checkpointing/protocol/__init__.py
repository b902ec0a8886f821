"""The documents of a pipeline's checkpoint storage and their keys (docs/PROTOCOL.md,
sections 4-5).
"""
