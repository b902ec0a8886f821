"""The read side: epoch statistics, summaries, history, listings, the catalog and
verification. Nothing here writes an epoch's outcome.
"""
